//go:build linux

package caps

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Self reads this process's effective capability set.
func Self() (Effective, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return Effective{}, fmt.Errorf("capget: %w", err)
	}
	return Effective{data[0].Effective, data[1].Effective}, nil
}

package python

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/rawfile"
)

// readMem copies len(buf) bytes at addr of process pid with one
// process_vm_readv call, which does not stop the target.
func readMem(pid int, addr uint64, buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	n, err := rawfile.ReadProcess(pid, addr, buf)
	switch {
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("read %d bytes at %#x: %w", len(buf), addr, procfs.ErrNoProcess)
	case errors.Is(err, unix.EFAULT):
		return fmt.Errorf("read %d bytes at %#x: %w", len(buf), addr, errInconsistent)
	case err != nil:
		return fmt.Errorf("read %d bytes at %#x: %w", len(buf), addr, err)
	case n < len(buf):
		return fmt.Errorf("read %d bytes at %#x: got %d: %w", len(buf), addr, n, errInconsistent)
	}
	return nil
}

// readPartial reads up to len(buf) bytes at addr and returns how many it
// got: a read may stop early where the mapping ends.
func readPartial(pid int, addr uint64, buf []byte) (int, error) {
	if !validPtr(addr) {
		return 0, fmt.Errorf("pointer %#x: %w", addr, errInconsistent)
	}
	n, err := rawfile.ReadProcess(pid, addr, buf)
	switch {
	case errors.Is(err, unix.ESRCH):
		return 0, fmt.Errorf("read %d bytes at %#x: %w", len(buf), addr, procfs.ErrNoProcess)
	case errors.Is(err, unix.EFAULT):
		return 0, fmt.Errorf("read %d bytes at %#x: %w", len(buf), addr, errInconsistent)
	case err != nil:
		return 0, fmt.Errorf("read %d bytes at %#x: %w", len(buf), addr, err)
	}
	return n, nil
}

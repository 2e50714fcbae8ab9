//go:build !(linux && amd64)

package native

import (
	"errors"
	"fmt"
	"runtime"
)

// ErrUnsupported reports a platform native stacks are not captured on:
// the stop and the unwinder are written for x86-64 Linux.
var ErrUnsupported = fmt.Errorf("native stacks are captured on linux/amd64 only, not %s/%s: %w", runtime.GOOS, runtime.GOARCH, errors.ErrUnsupported)

// Dump fails with ErrUnsupported.
func (u *Unwinder) Dump(pid int, o Options) (Result, error) {
	return Result{}, fmt.Errorf("dump %d: %w", pid, ErrUnsupported)
}

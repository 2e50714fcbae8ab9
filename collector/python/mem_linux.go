package python

import (
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// readMem copies len(buf) bytes at addr of process pid with one
// process_vm_readv call, which does not stop the target.
func readMem(pid int, addr uint64, buf []byte) error {
	if len(buf) == 0 {
		return nil
	}
	n, err := vmRead(pid, addr, buf)
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
	n, err := vmRead(pid, addr, buf)
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

// vmRead is one process_vm_readv of buf (not empty), made raw: the reads
// run while the target's threads are stopped (see native's Dump), and a
// plain system call may hand the calling goroutine's P (the right to run
// Go code) to another goroutine, to wait for one on the way back. It
// returns at once: the target's memory is read, never waited for.
func vmRead(pid int, addr uint64, buf []byte) (int, error) {
	local := unix.Iovec{Base: &buf[0]}
	local.SetLen(len(buf))
	remote := unix.RemoteIovec{Base: uintptr(addr), Len: len(buf)}
	n, _, e := unix.RawSyscall6(unix.SYS_PROCESS_VM_READV, uintptr(pid), uintptr(unsafe.Pointer(&local)), 1, uintptr(unsafe.Pointer(&remote)), 1, 0)
	runtime.KeepAlive(&local)
	runtime.KeepAlive(&remote)
	runtime.KeepAlive(buf)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}

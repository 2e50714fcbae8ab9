package rawfile

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ReadProcess reads another process's memory at addr into buf with one
// process_vm_readv, made raw: the stack readers call it while the target's
// threads are stopped, and a plain system call may hand the calling
// goroutine's P (the right to run Go code) to another goroutine, to wait
// for one on the way back. It returns at once: the target's memory is
// read, never waited for. An empty buf reads nothing.
func ReadProcess(pid int, addr uint64, buf []byte) (int, error) {
	if len(buf) == 0 {
		return 0, nil
	}
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

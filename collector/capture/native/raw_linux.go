package native

import (
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/rawfile"
)

// The system calls made while threads are stopped are raw: the tracer
// keeps its P (the Go scheduler's right to run Go code) across them. A
// plain system call lets the scheduler hand the P to another goroutine,
// and on the way back the tracer waits for one, up to a scheduler time
// slice (10 ms) while other goroutines are busy, every stopped thread
// waiting with it. Each of these calls returns at once (or after a nap of
// at most half a millisecond), so holding the P costs the others little.

func errnoErr(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// rawInterrupt is PTRACE_INTERRUPT.
func rawInterrupt(tid int) error {
	_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_INTERRUPT, uintptr(tid), 0, 0, 0, 0)
	return errnoErr(e)
}

// rawGetRegs is PTRACE_GETREGS into regs.
func rawGetRegs(tid int, regs *unix.PtraceRegs) error {
	_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_GETREGS, uintptr(tid), 0, uintptr(unsafe.Pointer(regs)), 0, 0)
	runtime.KeepAlive(regs)
	return errnoErr(e)
}

// rawDetach is PTRACE_DETACH, delivering sig.
func rawDetach(tid, sig int) error {
	_, _, e := unix.RawSyscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(tid), 0, uintptr(sig), 0, 0)
	return errnoErr(e)
}

// rawWait4 is wait4 of one thread with options (WNOHANG among them).
func rawWait4(tid int, ws *unix.WaitStatus, options int) (int, error) {
	var status int32
	r, _, e := unix.RawSyscall6(unix.SYS_WAIT4, uintptr(tid), uintptr(unsafe.Pointer(&status)), uintptr(options), 0, 0, 0)
	*ws = unix.WaitStatus(status)
	return int(r), errnoErr(e)
}

// rawNap sleeps d on this thread.
func rawNap(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	unix.RawSyscall(unix.SYS_NANOSLEEP, uintptr(unsafe.Pointer(&ts)), 0, 0)
	runtime.KeepAlive(&ts)
}

// readMem reads another process's memory, with one process_vm_readv.
func readMem(pid int, b []byte, addr uint64) (int, error) { return rawfile.ReadProcess(pid, addr, b) }

// Futex operations (linux/futex.h), on memory of this process alone.
const (
	futexWaitPrivate = 0 | 128 // FUTEX_WAIT | FUTEX_PRIVATE_FLAG
	futexWakePrivate = 1 | 128 // FUTEX_WAKE | FUTEX_PRIVATE_FLAG
)

// rawFutexWait sleeps on this thread while *addr holds val, at most d: a
// wait that keeps the P and is woken by rawFutexWake from another thread
// directly, with no goroutine of the scheduler's to wake on the way.
func rawFutexWait(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitPrivate, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
	runtime.KeepAlive(&ts)
}

// rawFutexWake wakes the threads in rawFutexWait on addr.
func rawFutexWake(addr *uint32) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakePrivate, 1<<30, 0, 0, 0)
}

package procfs

import (
	"bytes"
	"strconv"
)

// SyscallPC reads /proc/PID/task/TID/syscall and returns where a blocked
// thread will go on in user space: the instruction after its system call,
// or where it was when it last entered the kernel. A thread blocked in a
// hung process sits in a C library's system call wrapper, so this names,
// without stopping it, the library its first frame lies in. ok is false
// for a running thread, an unreadable file (no permission to trace, the
// thread gone) or one this kernel writes otherwise.
func SyscallPC(pid, tid int) (pc uint64, ok bool) {
	b, err := read(path(pid, "task", strconv.Itoa(tid), "syscall"))
	if err != nil {
		return 0, false
	}
	return ParseSyscall(b)
}

// ParseSyscall parses the text of a syscall file, which is one of
//
//	running
//	-1 SP PC                         (blocked, not in a system call)
//	NR ARG1 ARG2 ARG3 ARG4 ARG5 ARG6 SP PC
//
// with SP, PC and the arguments in hexadecimal (0x...), and returns PC.
func ParseSyscall(b []byte) (pc uint64, ok bool) {
	f := bytes.Fields(b)
	if len(f) != 3 && len(f) != 9 {
		return 0, false
	}
	if _, err := strconv.ParseInt(string(f[0]), 10, 64); err != nil {
		return 0, false
	}
	last := f[len(f)-1]
	if !bytes.HasPrefix(last, []byte("0x")) {
		return 0, false
	}
	pc, err := strconv.ParseUint(string(last[2:]), 16, 64)
	if err != nil || pc == 0 {
		return 0, false
	}
	return pc, true
}

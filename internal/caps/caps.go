// Package caps tells which capabilities this process holds in its effective
// set, read with capget(2), and whether it may ptrace.
package caps

import (
	"os"
	"strings"
)

// Capabilities the tracer and the stack capture need (linux/capability.h;
// caps_linux_test.go checks them against golang.org/x/sys/unix).
const (
	SysPtrace = 19 // CAP_SYS_PTRACE: ptrace processes of other users
	SysAdmin  = 21 // CAP_SYS_ADMIN: everything, BPF included before Linux 5.8
	Perfmon   = 38 // CAP_PERFMON: perf events, uprobes among them
	BPF       = 39 // CAP_BPF: load BPF programs and create maps
)

// Effective is a process's effective capability set.
type Effective [2]uint32

// Has says whether the set holds capability c.
func (e Effective) Has(c int) bool {
	return c >= 0 && c < 64 && e[c/32]&(1<<(uint(c)%32)) != 0
}

// Has says whether this process holds capability c in its effective set;
// false when the set cannot be read.
func Has(c int) bool {
	e, err := Self()
	return err == nil && e.Has(c)
}

// yamaScope is Yama's ptrace scope setting; a variable for tests.
var yamaScope = "/proc/sys/kernel/yama/ptrace_scope"

// PtraceAllowed says whether this process may ptrace processes of the
// same user and, as root, others: CAP_SYS_PTRACE in the effective set (or
// the same uid as the target), and Yama not at "no attach" (3). The
// reason is set when it is not.
func PtraceAllowed() (bool, string) {
	if b, err := os.ReadFile(yamaScope); err == nil && strings.TrimSpace(string(b)) == "3" {
		return false, "kernel.yama.ptrace_scope is 3 (ptrace disabled)"
	}
	if Has(SysPtrace) {
		return true, ""
	}
	return false, "CAP_SYS_PTRACE is missing"
}

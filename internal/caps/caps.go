// Package caps tells which capabilities this process holds in its effective
// set, read with capget(2).
package caps

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

//go:build linux && (386 || amd64)

package ebpf

import (
	"os"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// readyWait waits for a BPF ring buffer map to hold a record, parked in
// Go's netpoller: a descriptor of the map of its own, non-blocking,
// which the kernel reports readable when a record is committed with a
// wakeup (probes.bpf.c commits every process record with one).
//
// The ring buffer's reader waits in a blocking epoll_wait of its own,
// which holds a thread and its P in a system call for the whole wait
// (Run's poll interval). Go's monitor thread (sysmon) then takes the P
// back for another thread, each time, and polls every 20 µs for a
// while after: at a million launches a second this churn was a fifth of
// the launcher's CPU on the CI VM, where a sleep and a thread switch are
// costly. Parked in the netpoller, Run's goroutine holds no thread.
type readyWait struct {
	f  *os.File
	rc syscall.RawConn
}

// newReadyWait is a readyWait on m, or nil where the descriptor cannot
// be polled through Go's netpoller (then the reader's own wait serves).
func newReadyWait(m *ebpf.Map) *readyWait {
	fd, err := unix.FcntlInt(uintptr(m.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil
	}
	f := os.NewFile(uintptr(fd), "ring buffer "+m.String())
	rc, err := f.SyscallConn()
	if err != nil || f.SetReadDeadline(time.Time{}) != nil { // not in the netpoller
		f.Close()
		return nil
	}
	return &readyWait{f: f, rc: rc}
}

// wait returns once ready says true (asked first, and after each wakeup)
// or after d, or once closed.
func (w *readyWait) wait(d time.Duration, ready func() bool) {
	if ready() {
		return
	}
	if w.f.SetReadDeadline(time.Now().Add(d)) != nil {
		return // closed
	}
	_ = w.rc.Read(func(uintptr) bool { return ready() })
}

// interrupt ends a wait under way now (one that begins after it still
// waits: callers pair it with a mark their ready checks).
func (w *readyWait) interrupt() { _ = w.f.SetReadDeadline(time.Now()) }

func (w *readyWait) close() error { return w.f.Close() }

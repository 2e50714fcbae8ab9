//go:build linux && (386 || amd64)

package ebpf

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// The guard of the holds. A tracer that dies without its Close (SIGKILL,
// the OOM killer, a crash) while a process is held leaves that process
// stopped for good: nothing else sends it SIGCONT. So a tracer that holds
// starts a guard, a process of its own binary that outlives it: the guard
// keeps a file descriptor of the map held (which keeps the map) and the
// read end of a pipe whose write end only the tracer has. A tracer that
// closes writes guardClean first, and the guard exits; a pipe that ends
// without it means the tracer is gone, its links with it: the guard
// resumes every process the map holds, again after each of guardAfter
// (a program that was running as the tracer died), and exits.
//
// The guard is the tracer's binary run again (/proc/self/exe) with
// guardEnv set, which this package's init turns into the guard before
// any main runs: every binary that makes a tracer can be its guard.

// guardEnv, set to 1 in the guard's environment, makes a process the
// guard.
const guardEnv = "XPU_TIMER_HOLD_GUARD"

// guardClean is what a tracer's Close writes to its guard.
const guardClean = 'c'

// guardAfter are the guard's waits before it resumes the held again,
// once its tracer is gone.
var guardAfter = []time.Duration{50 * time.Millisecond, time.Second}

// guardExe is the binary the guard runs: this one (a test's own to make
// the start fail).
var guardExe = "/proc/self/exe"

// The guard's file descriptors: the map held, the pipe's read end.
const (
	guardMapFD  = 3
	guardPipeFD = 4
)

func init() {
	if os.Getenv(guardEnv) == "1" {
		os.Exit(runGuard())
	}
}

// runGuard is the guard's life (see above); its exit status.
func runGuard() int {
	// A terminal's interrupt or hangup, or a signal to the tracer's
	// process group, must not end the guard before its tracer.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	held, err := ebpf.NewMapFromFD(guardMapFD)
	if err != nil {
		return 1
	}
	var b [1]byte
	if n, _ := os.NewFile(guardPipeFD, "tracer").Read(b[:]); n == 1 && b[0] == guardClean {
		return 0
	}
	h := &holds{held: held}
	h.resumeHeld(0)
	for _, d := range guardAfter {
		time.Sleep(d)
		h.resumeHeld(0)
	}
	return 0
}

// guard is a tracer's side of its guard.
type guard struct {
	pid int
	w   *os.File // the pipe's write end
}

// startGuard starts the guard of the map held. A tracer whose guard
// cannot start (no fork or exec of its own binary) works on without it,
// and says so (NewTracer).
func startGuard(held *ebpf.Map) (*guard, error) {
	fd, err := unix.FcntlInt(uintptr(held.FD()), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	m := os.NewFile(uintptr(fd), "held")
	defer m.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command(guardExe)
	cmd.Args = []string{"xpu-timer-holdguard"}
	cmd.Env = []string{guardEnv + "=1"}
	cmd.ExtraFiles = []*os.File{m, r} // guardMapFD, guardPipeFD
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	return &guard{pid: cmd.Process.Pid, w: w}, nil
}

// close tells the guard that its tracer closed (every held process
// resumed) and reaps it, waiting at most closeWait.
func (g *guard) close() {
	if g == nil || g.w == nil {
		return
	}
	_, _ = g.w.Write([]byte{guardClean})
	g.w.Close()
	g.w = nil
	for end := time.Now().Add(closeWait); ; time.Sleep(5 * time.Millisecond) {
		if pid, err := unix.Wait4(g.pid, nil, unix.WNOHANG, nil); pid == g.pid || err != nil || time.Now().After(end) {
			return
		}
	}
}

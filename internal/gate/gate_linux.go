// Package gate starts a command held at its exec, before its first
// instruction (ld.so's), until the caller lets it go: a tracer that
// follows it meanwhile sees everything it does, the libraries its loader
// maps first of all. The hold is ptrace's stop at exec (PTRACE_TRACEME in
// the child), ended by PTRACE_DETACH; the command's parent sees nothing of
// it. Where ptrace is refused (Yama's ptrace_scope 3, a seccomp profile)
// the command starts as usual and a tracer races its start, as before.
package gate

import (
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// Gate holds a started command until Open.
type Gate struct {
	pid  int
	open chan struct{}
	done chan error
}

// Start starts the command that newCmd makes, held at its exec. newCmd
// may be called twice: a second time, to start it unheld, when ptrace is
// refused. The returned command is the one started; Wait on it as usual
// once the gate is open (a held command does not exit).
func Start(newCmd func() *exec.Cmd) (*exec.Cmd, *Gate, error) {
	cmd := newCmd()
	g := &Gate{open: make(chan struct{}), done: make(chan error, 1)}
	started := make(chan error, 1)
	// ptrace requests come from the thread that became the tracer: the
	// one that forked the child. It stays locked to this goroutine until
	// the detach.
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.Ptrace = true
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		g.pid = cmd.Process.Pid
		stopped, err := waitExecStop(g.pid)
		started <- err
		if err != nil || !stopped {
			g.done <- err
			return
		}
		<-g.open
		if err := unix.PtraceDetach(g.pid); err != nil && !errors.Is(err, unix.ESRCH) {
			g.done <- fmt.Errorf("let %d go: %w", g.pid, err)
			return
		}
		g.done <- nil
	}()
	err := <-started
	if err != nil && cmd.Process == nil && (errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)) {
		// ptrace refused in the child: start it the usual way.
		cmd = newCmd()
		if err := cmd.Start(); err != nil {
			return nil, nil, err
		}
		g = &Gate{pid: cmd.Process.Pid, open: make(chan struct{}), done: make(chan error, 1)}
		g.done <- nil
		return cmd, g, nil
	}
	if err != nil {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		return nil, nil, err
	}
	return cmd, g, nil
}

// waitExecStop waits for the child's stop at its exec (the SIGTRAP that
// PTRACE_TRACEME makes exec send) and takes it; a child that died instead
// (killed at once) is left to its Wait: stopped is false.
func waitExecStop(pid int) (stopped bool, err error) {
	for {
		var info unix.Siginfo
		// WNOWAIT: an exit stays for exec.Cmd.Wait to reap.
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT|unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("wait for %d's exec: %w", pid, err)
		}
		if code := info.Code; code != cldTrapped && code != cldStopped {
			return false, nil
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
			return false, fmt.Errorf("wait for %d's exec: %w", pid, err)
		}
		return true, nil
	}
}

// si_code values of a child's stop (<asm-generic/siginfo.h>).
const (
	cldStopped = 5
	cldTrapped = 4
)

// PID is the held command's process id.
func (g *Gate) PID() int { return g.pid }

// Open lets the command go on and says whether it could be let go. Only
// the first call opens; later ones return nil.
func (g *Gate) Open() error {
	select {
	case <-g.open:
		return nil
	default:
	}
	close(g.open)
	return <-g.done
}

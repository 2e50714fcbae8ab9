// Package process starts the command a launcher runs and carries exit
// statuses out of commands.
package process

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
	"github.com/xpu-timer/xpu-timer/internal/gate"
)

// Forwarded are the signals a launcher passes on to its child.
var Forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP}

// Child is a command started by a launcher, in the launcher's own process
// group (so a terminal's job control and reads from stdin work as without
// the launcher).
type Child struct {
	Cmd  *exec.Cmd
	sigs chan os.Signal
	done chan struct{}
}

// Start starts args with the given standard streams and forwards
// Forwarded signals to it until Wait returns. With hold, the child is held
// at its exec, before its first instruction, while hold(pid) runs
// (internal/gate): a tracer that follows it there sees everything it
// does, its loader's first mappings included.
func Start(args []string, stdin io.Reader, stdout, stderr io.Writer, hold func(pid int)) (*Child, error) {
	if len(args) == 0 {
		return nil, errors.New("no command to run")
	}
	newCmd := func() *exec.Cmd {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
		return cmd
	}
	c := &Child{sigs: make(chan os.Signal, 8), done: make(chan struct{})}
	// Catch the signals before the start so none is lost in between.
	signal.Notify(c.sigs, Forwarded...)
	var err error
	if hold == nil {
		c.Cmd = newCmd()
		err = c.Cmd.Start()
	} else {
		var g *gate.Gate
		if c.Cmd, g, err = gate.Start(newCmd); err == nil {
			hold(g.PID())
			err = g.Open()
		}
	}
	if err != nil {
		signal.Stop(c.sigs)
		if c.Cmd != nil && c.Cmd.Process != nil {
			_ = c.Cmd.Process.Kill()
			_ = c.Cmd.Wait()
		}
		return nil, fmt.Errorf("start %s: %w", args[0], err)
	}
	cmd := c.Cmd
	go func() {
		for {
			select {
			case s := <-c.sigs:
				_ = cmd.Process.Signal(s)
			case <-c.done:
				return
			}
		}
	}()
	return c, nil
}

// PID is the child's process id.
func (c *Child) PID() int { return c.Cmd.Process.Pid }

// Wait waits for the child and returns its exit status as a shell reports
// it: the exit code, or 128+N when signal N killed it.
func (c *Child) Wait() (int, error) {
	err := c.Cmd.Wait()
	signal.Stop(c.sigs)
	close(c.done)
	return StatusOf(c.Cmd.ProcessState, err)
}

// StatusOf converts a finished process's state to a shell exit status.
func StatusOf(ps *os.ProcessState, err error) (int, error) {
	if ps == nil {
		return 1, err
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return ps.ExitCode(), err
	}
	return ps.ExitCode(), nil
}

// StartStatus is the status of a command that could not be started, as a
// shell gives it: 127 when it was not found, else 126.
func StartStatus(err error) int {
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return exitcode.NotFound
	}
	return exitcode.CannotRun
}

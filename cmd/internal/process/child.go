// Package process starts the command a launcher runs and carries exit
// statuses out of commands.
package process

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
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
// Forwarded signals to it until Wait returns.
func Start(args []string, stdin io.Reader, stdout, stderr io.Writer) (*Child, error) {
	if len(args) == 0 {
		return nil, errors.New("no command to run")
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	c := &Child{Cmd: cmd, sigs: make(chan os.Signal, 8), done: make(chan struct{})}
	// Catch the signals before the start so none is lost in between.
	signal.Notify(c.sigs, Forwarded...)
	if err := cmd.Start(); err != nil {
		signal.Stop(c.sigs)
		return nil, fmt.Errorf("start %s: %w", args[0], err)
	}
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

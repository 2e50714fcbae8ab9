package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Errors of Group.Until.
var (
	ErrTimeout = errors.New("timeout")
	ErrExited  = errors.New("exited")
)

// Line is one line a command wrote, stamped when it was read.
type Line struct {
	At     time.Time
	Stderr bool
	Text   string
}

// Group is a command started in a process group of its own (so that the
// whole job it starts can be ended at once), every line of its stdout and
// stderr recorded as it arrives.
type Group struct {
	Cmd *exec.Cmd

	onLine func(Line)
	mu     sync.Mutex
	lines  []Line
	wake   chan struct{} // closed on every new line and on exit
	done   bool
	code   int
	exit   chan struct{}
}

// StartGroup starts cmd, whose Stdout and Stderr must be unset, in a
// process group of its own. onLine, when not nil, sees every line in
// arrival order, before any waiter is woken.
func StartGroup(cmd *exec.Cmd, onLine func(Line)) (*Group, error) {
	g := &Group{Cmd: cmd, onLine: onLine, wake: make(chan struct{}), exit: make(chan struct{})}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	var readers sync.WaitGroup
	readers.Add(2)
	go g.read(outR, false, &readers)
	go g.read(errR, true, &readers)
	go func() {
		cmd.Wait()
		readers.Wait()
		g.mu.Lock()
		g.done, g.code = true, ExitCode(cmd.ProcessState)
		g.signal()
		g.mu.Unlock()
		close(g.exit)
	}()
	return g, nil
}

// ExitCode is a finished process's status as a shell reports it: the exit
// code, 128+N when signal N killed it, -1 when it never ran.
func ExitCode(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func (g *Group) read(r io.ReadCloser, stderr bool, wg *sync.WaitGroup) {
	defer wg.Done()
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		l := Line{At: time.Now(), Stderr: stderr, Text: sc.Text()}
		g.mu.Lock()
		g.lines = append(g.lines, l)
		if g.onLine != nil {
			g.onLine(l)
		}
		g.signal()
		g.mu.Unlock()
	}
}

// signal wakes the waiters; g.mu held.
func (g *Group) signal() {
	close(g.wake)
	g.wake = make(chan struct{})
}

// Until waits until cond holds (it is called without Group's lock, at
// once and after every new line), and fails with ErrExited when the
// command exits first or ErrTimeout after timeout.
func (g *Group) Until(timeout time.Duration, cond func() bool) error {
	deadline := time.After(timeout)
	for {
		g.mu.Lock()
		done, code, wake := g.done, g.code, g.wake
		g.mu.Unlock()
		if cond() {
			return nil
		}
		if done {
			return fmt.Errorf("%w with %d", ErrExited, code)
		}
		select {
		case <-wake:
		case <-deadline:
			return fmt.Errorf("%w: nothing after %v", ErrTimeout, timeout)
		}
	}
}

// Lines returns the lines from the from'th on.
func (g *Group) Lines(from int) []Line {
	g.mu.Lock()
	defer g.mu.Unlock()
	if from >= len(g.lines) {
		return nil
	}
	return append([]Line(nil), g.lines[from:]...)
}

// Output is everything the command wrote so far, a line each.
func (g *Group) Output() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var b strings.Builder
	for _, l := range g.lines {
		b.WriteString(l.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

// Exited says whether the command has exited, and with which status.
func (g *Group) Exited() (bool, int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.done, g.code
}

// Done is closed once the command exited and its output is read.
func (g *Group) Done() <-chan struct{} { return g.exit }

// Kill sends SIGKILL to the command's whole process group.
func (g *Group) Kill() { _ = syscall.Kill(-g.Cmd.Process.Pid, syscall.SIGKILL) }

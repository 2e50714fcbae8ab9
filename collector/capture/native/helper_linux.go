//go:build linux && amd64

package native

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// A child of this process is stopped by a helper process. The kernel
// reports the ptrace stops of a tracee to every thread of its tracer's
// process, and when that process is also the tracee's parent, a goroutine
// waiting for the child (exec.Cmd.Wait, as the launcher does) takes those
// reports and returns as if the child had ended, while the dump waits in
// vain. The helper is this executable run again with helperEnv set: it
// stops, copies and resumes the target like stopAll, and hands the copies
// back over its standard output.
const helperEnv = "XPU_TIMER_NATIVE_STOP_HELPER"

func init() {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(runHelper(os.Stdin, os.Stdout))
	}
}

// helperRequest is what the dump asks of the helper.
type helperRequest struct {
	PID        int
	MaxStop    time.Duration
	MaxStack   int
	Maps       []procfs.Mapping
	Stragglers time.Duration
}

// helperMsg is one message of the helper: Stopped while it holds every
// thread (the dump answers with one byte when it may resume them), then
// the Result.
type helperMsg struct {
	Stopped bool
	Result  *helperResult
}

type helperResult struct {
	Threads    []wireThread
	StoppedFor time.Duration
	Partial    bool
}

type wireThread struct {
	TID     int
	State   byte
	Name    string
	Regs    unix.PtraceRegs
	StackLo uint64
	Stack   []byte
	Err     string
	Errno   unix.Errno
}

// remoteError is an error of the helper: its text and system error.
type remoteError struct {
	msg   string
	errno unix.Errno
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Unwrap() error {
	if e.errno == 0 {
		return nil
	}
	return e.errno
}

// runHelper serves one request and returns the exit status.
func runHelper(in io.Reader, out io.Writer) int {
	runtime.LockOSThread()
	r := bufio.NewReader(in)
	req, err := readRequest(&wireReader{r: r})
	if err != nil {
		fmt.Fprintf(os.Stderr, "stop helper: read request: %v\n", err)
		return 2
	}
	w := newWireWriter(out)
	// The dump's answer, or the end of our input when the dump died.
	resume := make(chan struct{})
	begin := time.Now()
	o := Options{MaxStop: req.MaxStop, MaxStack: req.MaxStack, Stragglers: req.Stragglers, WhileStopped: func() error {
		go func() {
			r.ReadByte()
			close(resume)
		}()
		if err := writeStopped(w); err != nil {
			return err
		}
		select {
		case <-resume:
		case <-time.After(time.Until(begin.Add(req.MaxStop))):
		}
		return nil
	}}
	ts, s := stopAll(req.PID, o, req.Maps)
	res := &helperResult{StoppedFor: s.stoppedFor, Partial: s.partial}
	for _, t := range s.threads {
		w := wireThread{TID: t.tid, State: t.state, Name: t.name, Regs: t.regs, StackLo: t.stackLo, Stack: t.stack}
		if t.err != nil {
			w.Err = t.err.Error()
			errors.As(t.err, &w.Errno)
		}
		res.Threads = append(res.Threads, w)
	}
	err = writeResult(w, res)
	settle(req.PID, ts, time.Now().Add(releaseWait))
	if err != nil {
		return 1
	}
	return 0
}

// stopByHelper runs the ptrace phase in a helper process.
func stopByHelper(pid int, o Options, maps []procfs.Mapping) (stopped, error) {
	cmd := exec.Command("/proc/self/exe")
	cmd.Args = []string{"xpu-timer-stop-helper"}
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return stopped{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return stopped{}, err
	}
	if err := cmd.Start(); err != nil {
		return stopped{}, fmt.Errorf("start stop helper: %w", err)
	}
	// The helper stays a while after answering, to let go of threads that
	// stop late: reap it whenever it ends.
	defer func() {
		stdin.Close()
		go cmd.Wait()
	}()
	req := helperRequest{PID: pid, MaxStop: o.MaxStop, MaxStack: o.MaxStack, Maps: maps, Stragglers: o.Stragglers}
	if err := writeRequest(newWireWriter(stdin), &req); err != nil {
		return stopped{}, fmt.Errorf("stop helper: %w", err)
	}
	var s stopped
	dec := &wireReader{r: bufio.NewReader(stdout)}
	for {
		m, err := readMsg(dec)
		if err != nil {
			return stopped{}, fmt.Errorf("stop helper: %w", err)
		}
		if m.Stopped {
			if o.WhileStopped != nil {
				s.whileErr = o.WhileStopped()
			}
			// The helper may have let go at the bound and ended already.
			stdin.Write([]byte{1})
			continue
		}
		if m.Result == nil {
			return stopped{}, errors.New("stop helper: empty answer")
		}
		s.stoppedFor, s.partial = m.Result.StoppedFor, m.Result.Partial
		for _, w := range m.Result.Threads {
			t := &snapshot{tid: w.TID, state: w.State, name: w.Name, regs: w.Regs, stackLo: w.StackLo, stack: w.Stack}
			if w.Err != "" {
				t.err = &remoteError{msg: w.Err, errno: w.Errno}
			}
			s.threads = append(s.threads, t)
		}
		return s, nil
	}
}

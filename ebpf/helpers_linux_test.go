//go:build linux && (386 || amd64)

package ebpf

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/timer"
)

// gcc builds a C file of testdata into dir.
func gcc(t testing.TB, out string, args ...string) string {
	t.Helper()
	cmd := exec.Command("gcc", append([]string{"-O1", "-g", "-Wall", "-o", out}, args...)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc %v: %v\n%s", args, err, b)
	}
	return out
}

// stubs are the test's own stand-in vendor libraries and the calls program.
type stubs struct {
	Dir                 string
	Calls               string // calls program
	CUDA, MACA, Renamed string // libraries: CUDA names, MACA names, CUDA names without EventElapsedTime under a foreign file name
}

var (
	stubOnce sync.Once
	stubDir  string
	stubErr  error
)

func buildStubs(t testing.TB) stubs {
	t.Helper()
	stubOnce.Do(func() {
		dir, err := mkdirTemp()
		if err != nil {
			stubErr = err
			return
		}
		stubDir = dir
	})
	if stubErr != nil {
		t.Fatal(stubErr)
	}
	s := stubs{
		Dir:     stubDir,
		Calls:   filepath.Join(stubDir, "calls"),
		Renamed: filepath.Join(stubDir, "libvendorx.so"),
	}
	buildOnce.Do(func() {
		gcc(t, s.Calls, "testdata/calls.c", "-ldl")
		gcc(t, s.Renamed, "-shared", "-fPIC", "-DNO_ELAPSED", "-s", "testdata/stub.c")
	})
	return s
}

var buildOnce sync.Once

// proc is a started test program with its stdin and stdout lines.
type proc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	out   []string
}

func start(t testing.TB, name string, args ...string) *proc {
	t.Helper()
	return startEnv(t, nil, name, args...)
}

// startEnv is start with env added to the environment.
func startEnv(t testing.TB, env []string, name string, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(name, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = &strings.Builder{}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stdin: stdin, lines: make(chan string, 1024)}
	// The lines a test did not read (a process that printed more than
	// the buffer holds) are dropped once it ends: the reader must not
	// outlive the test.
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			case <-done:
				return
			}
		}
		close(p.lines)
	}()
	t.Cleanup(func() {
		close(done)
		_ = stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// followed has tr follow p once p is ready, then lets p make its calls
// and returns what p printed until it was done.
func (p *proc) followed(t testing.TB, tr *Tracer) []string {
	t.Helper()
	p.until(t, "ready")
	if err := tr.Follow(p.pid()); err != nil {
		t.Fatal(err)
	}
	p.send(t, "go")
	return p.until(t, "done")
}

// until reads lines up to and including one equal to want.
func (p *proc) until(t testing.TB, want string) []string {
	t.Helper()
	var got []string
	timeout := time.After(10 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("%s exited before %q: %v\nstderr: %s", p.cmd.Path, want, got, p.cmd.Stderr)
			}
			p.out = append(p.out, l)
			if l == want {
				return got
			}
			got = append(got, l)
		case <-timeout:
			t.Fatalf("%s: no %q within 10s: %v", p.cmd.Path, want, got)
		}
	}
}

func (p *proc) send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		t.Fatal(err)
	}
}

// recorder runs a tracer and keeps what it reports.
type recorder struct {
	tr      *Tracer
	mu      sync.Mutex
	events  []timer.Event
	notices []Notice
	done    chan error
	cancel  context.CancelFunc
}

func newTracer(t testing.TB, opts Options) *Tracer {
	t.Helper()
	privileged.Root(t)
	tr, err := NewTracer(opts)
	if err != nil {
		t.Fatalf("NewTracer: %v", err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func record(t testing.TB, tr *Tracer) *recorder {
	ctx, cancel := context.WithCancel(context.Background())
	r := &recorder{tr: tr, done: make(chan error, 1), cancel: cancel}
	go func() {
		r.done <- tr.Run(ctx, func(evs []timer.Event) {
			r.mu.Lock()
			r.events = append(r.events, evs...)
			r.mu.Unlock()
		}, func(n Notice) {
			r.mu.Lock()
			r.notices = append(r.notices, n)
			r.mu.Unlock()
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
	// Run reads: from now on processes are held at their loads.
	select {
	case <-tr.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not start reading in 10 s")
	}
	return r
}

// waitFor polls until cond holds on what was recorded, or fails after 10 s.
func (r *recorder) waitFor(t testing.TB, what string, cond func(evs []timer.Event, ns []Notice) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.mu.Lock()
		ok := cond(r.events, r.notices)
		r.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("timed out waiting for %s; %d events, notices %+v", what, len(r.events), r.notices)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *recorder) of(pid int) []timer.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []timer.Event
	for _, e := range r.events {
		if e.PID == pid {
			out = append(out, e)
		}
	}
	return out
}

func hasEvent(evs []timer.Event, pid int, k timer.Kind) bool {
	for _, e := range evs {
		if e.PID == pid && e.Kind == k {
			return true
		}
	}
	return false
}

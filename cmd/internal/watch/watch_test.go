package watch

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/agent"
	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
	"github.com/xpu-timer/xpu-timer/ebpf"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
	"github.com/xpu-timer/xpu-timer/timer"
)

// stuckTracer reports, for every followed pid, a kernel launched 10 s ago
// and a thread blocked on it since.
type stuckTracer struct{ pids chan int }

func (s *stuckTracer) Follow(pid int) error { s.pids <- pid; return nil }
func (s *stuckTracer) Run(ctx context.Context, onEvents func([]timer.Event), onNotice func(ebpf.Notice)) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case pid := <-s.pids:
			t := agent.Monotonic() - int64(10*time.Second)
			onNotice(ebpf.Notice{Kind: "attach", PID: pid, Library: "libcudart.so.12", Attached: []string{"cudaLaunchKernel"}})
			onEvents([]timer.Event{
				{Time: t, PID: pid, TID: pid, Kind: timer.KindCollective, Op: timer.OpAllReduce, Comm: 1, Stream: 3, Count: 8, Dtype: 7},
				{Time: t + 1, PID: pid, TID: pid, Kind: timer.KindStreamSynchronize, Stream: 3},
			})
		}
	}
}
func (s *stuckTracer) Stats() ebpf.Stats { return ebpf.Stats{} }
func (s *stuckTracer) Probed(int) bool   { return true }
func (s *stuckTracer) Close() error      { return nil }

func useStuck(t *testing.T) {
	old := testTracer
	testTracer = &stuckTracer{pids: make(chan int, 4)}
	t.Cleanup(func() { testTracer = old })
}

func lines(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestWatchPIDExitOnHang(t *testing.T) {
	useStuck(t)
	p := exec.Command("sleep", "30")
	p.Env = append(os.Environ(), "RANK=2", "WORLD_SIZE=4", "LOCAL_RANK=2")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { p.Process.Kill(); p.Wait() }()
	cmd := New()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs([]string{"--timeout", "2", "--interval", "50ms", "--exit-on-hang", "--pid", strconv.Itoa(p.Process.Pid)})
	err := cmd.Execute()
	var st exitcode.Status
	if !errors.As(err, &st) || st != exitcode.Hang {
		t.Fatalf("error %v, want exit status %d; stderr %s", err, exitcode.Hang, errb.String())
	}
	var hang map[string]any
	events := map[string]int{}
	for _, m := range lines(t, out.Bytes()) {
		events[m["event"].(string)]++
		if m["event"] == "hang" {
			hang = m
		}
	}
	if events["attach"] != 1 || events["rank"] != 1 || hang == nil {
		t.Fatalf("events %v\n%s", events, out.String())
	}
	if hang["rank"] != 2.0 || hang["pid"] != float64(p.Process.Pid) || hang["op"] != "AllReduce" || hang["kind"] != "gpu" || hang["timeout_s"] != 2.0 {
		t.Fatalf("hang line %v", hang)
	}
}

func TestWatchCommandExitStatus(t *testing.T) {
	useStuck(t)
	cmd := New()
	var out, errb bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SetArgs([]string{"--timeout", "100s", "--", "sh", "-c", "echo to-stderr; exit 5"})
	err := cmd.Execute()
	var st exitcode.Status
	if !errors.As(err, &st) || st != 5 {
		t.Fatalf("error %v, want exit status 5", err)
	}
	ls := lines(t, out.Bytes()) // stdout holds JSON only
	last := ls[len(ls)-1]
	if last["event"] != "exit" || last["exit_code"] != 5.0 {
		t.Fatalf("last line %v", last)
	}
	if !bytes.Contains(errb.Bytes(), []byte("to-stderr")) {
		t.Fatalf("command output not on stderr: %q", errb.String())
	}
}

func TestWatchUsage(t *testing.T) {
	cmd := New()
	cmd.SetOut(&bytes.Buffer{})
	var errb bytes.Buffer
	cmd.SetErr(&errb)
	cmd.SetArgs([]string{"--timeout", "3s"})
	if err := cmd.Execute(); err == nil {
		t.Fatal("no pid and no command accepted")
	}
	cmd.SetArgs([]string{"--timeout", "soon", "--pid", "1"})
	if err := cmd.Execute(); err == nil {
		t.Fatal("bad timeout accepted")
	}
}

// With --exit-on-hang, a command watch started does not outlive it: SIGTERM
// ends one that honours it; one that ignores it is killed after the grace.
func TestWatchEndsStartedCommandOnHang(t *testing.T) {
	useStuck(t)
	old := endGrace
	endGrace = 300 * time.Millisecond
	t.Cleanup(func() { endGrace = old })
	for _, tc := range []struct {
		name, script string
		killed       bool
	}{
		{"honours SIGTERM", `trap 'exit 0' TERM; while :; do sleep 0.05; done`, false},
		{"ignores SIGTERM", `trap '' TERM; while :; do sleep 0.05; done`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := New()
			var out bytes.Buffer
			var errb testutil.LockedBuffer // written by the command's copier and by watch at once
			cmd.SetOut(&out)
			cmd.SetErr(&errb)
			// The first check comes after an interval, long after the shell
			// set its trap.
			cmd.SetArgs([]string{"--timeout", "1", "--interval", "300ms", "--exit-on-hang", "--", "sh", "-c", tc.script})
			err := cmd.Execute()
			var st exitcode.Status
			if !errors.As(err, &st) || st != exitcode.Hang {
				t.Fatalf("error %v, want exit status %d; stderr %s", err, exitcode.Hang, errb.String())
			}
			pid := 0
			for _, m := range lines(t, out.Bytes()) {
				if m["event"] == "hang" {
					pid = int(m["pid"].(float64))
				}
			}
			if pid == 0 {
				t.Fatalf("no hang line:\n%s", out.String())
			}
			if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
				syscall.Kill(pid, syscall.SIGKILL)
				t.Fatalf("command %d still exists after watch returned (kill 0: %v)", pid, err)
			}
			if killed := strings.Contains(errb.String(), "killing it"); killed != tc.killed {
				t.Fatalf("killed after the grace: %v, want %v; stderr %s", killed, tc.killed, errb.String())
			}
		})
	}
}

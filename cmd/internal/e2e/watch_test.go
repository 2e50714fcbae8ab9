package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/agent"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
)

// watch runs `xpu-timer watch --timeout T --exit-on-hang -- ARGS...`.
func watch(t *testing.T, hangTimeout time.Duration, args ...string) *proc {
	t.Helper()
	return start(t, append([]string{bins.xpu, "watch", "--timeout", hangTimeout.String(), "--exit-on-hang", "--"}, args...))
}

// reports decodes watch's stdout, which must hold JSON lines only.
func reports(t *testing.T, p *proc) []agent.Report {
	t.Helper()
	var out []agent.Report
	for _, l := range p.stdout() {
		var r agent.Report
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("stdout line is not a report: %q: %v", l, err)
		}
		out = append(out, r)
	}
	return out
}

func events(rs []agent.Report, kind agent.Event) []agent.Report {
	var out []agent.Report
	for _, r := range rs {
		if r.Event == kind {
			out = append(out, r)
		}
	}
	return out
}

// TestWatchFaults: watch prints the hang as JSON, naming the hung ranks
// and the collective they are stuck in, exits 3, and ends the job it
// started.
func TestWatchFaults(t *testing.T) {
	privileged.Root(t)
	b := testbed.Build(t)
	for _, c := range []job{{fault: testbed.FaultSkipCollective, rank: 2}, {fault: testbed.FaultNCCLStall, rank: 1}} {
		t.Run(c.fault, func(t *testing.T) {
			p := watch(t, timeout, c.args(b)...)
			code := p.waitExit(60 * time.Second)
			rs := reports(t, p)
			if code != 3 {
				t.Fatalf("watch exited %d, want 3 (--exit-on-hang)\n%s", code, p.output())
			}
			hangs := events(rs, "hang")
			if len(hangs) == 0 {
				t.Fatalf("no hang line:\n%s", p.output())
			}
			pids := p.rankPIDs()
			var ranks []int
			for _, h := range hangs {
				if h.Rank == nil || h.Op != "AllReduce" || h.Kind != "gpu" || h.Comm == "" || h.Seq == 0 || h.WorldSize != nproc ||
					h.PID != pids[*h.Rank] || h.AgeSeconds < timeout.Seconds() || h.Timeout != timeout.Seconds() {
					b, _ := json.Marshal(h)
					t.Errorf("hang line %s: want rank, pid, gpu, op AllReduce, comm, seq, world size %d, age past %v", b, nproc, timeout)
					continue
				}
				ranks = append(ranks, *h.Rank)
			}
			slices.Sort(ranks)
			t.Logf("%s: hang lines name ranks %v, op %s, seqs %s", c.fault, ranks, hangs[0].Op, seqs(hangs))
			p.checkClean() // watch ended the job it started
		})
	}
}

func seqs(hs []agent.Report) string {
	var s []string
	for _, h := range hs {
		if h.Rank != nil {
			s = append(s, fmt.Sprintf("rank %d #%d", *h.Rank, h.Seq))
		}
	}
	return fmt.Sprint(s)
}

// TestWatchNoFalseAlarm: a healthy job, and a process that finished its GPU
// work and then sleeps and burns CPU, each past the timeout, raise nothing.
func TestWatchNoFalseAlarm(t *testing.T) {
	privileged.Root(t)
	b := testbed.Build(t)
	const hangTimeout = time.Second
	for _, c := range []struct {
		name string
		args []string
	}{
		{"healthy job", job{extra: []string{"--step-ms", "60"}}.args(b)},
		{"idle then busy", []string{"python3", "testdata/idle.py", b.Dir, "2.5"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := watch(t, hangTimeout, c.args...)
			code := p.waitExit(60 * time.Second)
			rs := reports(t, p)
			if code != 0 {
				t.Fatalf("watch exited %d, want the command's 0\n%s", code, p.output())
			}
			if hs := events(rs, "hang"); len(hs) > 0 {
				b, _ := json.Marshal(hs[0])
				t.Fatalf("false alarm: %s", b)
			}
			if len(events(rs, "attach")) == 0 {
				t.Fatalf("no probe attached: the check proves nothing\n%s", p.output())
			}
			last := rs[len(rs)-1]
			if last.Event != "exit" || last.ExitCode == nil || *last.ExitCode != 0 {
				t.Fatalf("last line %+v, want the command's exit", last)
			}
			p.checkClean()
		})
	}
}

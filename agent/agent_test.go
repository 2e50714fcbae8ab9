package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/dump"
	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/ebpf"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/ranks"
	"github.com/xpu-timer/xpu-timer/timer"
)

const sec = int64(time.Second)

// fakeTracer delivers nothing by itself; tests call HandleEvent.
type fakeTracer struct {
	mu       sync.Mutex
	followed []int
	stats    ebpf.Stats
	events   []timer.Event // delivered by Run
	ran      chan struct{}
	unprobed bool // Probed says no for every process
}

func (f *fakeTracer) Follow(pid int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.followed = append(f.followed, pid)
	return nil
}

func (f *fakeTracer) Run(ctx context.Context, onEvents func([]timer.Event), onNotice func(ebpf.Notice)) error {
	onEvents(slices.Clone(f.events))
	onNotice(ebpf.Notice{Kind: "attach", PID: 100, Library: "libcudart.so.12", Attached: []string{"cudaLaunchKernel"}})
	if f.ran != nil {
		close(f.ran)
	}
	<-ctx.Done()
	return ctx.Err()
}

// Probed says every process maps a probed library, unless unprobed.
func (f *fakeTracer) Probed(int) bool { return !f.unprobed }

func (f *fakeTracer) Stats() ebpf.Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stats
}

func (f *fakeTracer) Close() error { return nil }

// fakeCapture returns one thread per process and counts calls and
// read-aheads.
type fakeCapture struct {
	mu     sync.Mutex
	calls  map[int]int
	warms  map[int]int
	errors map[int][]string // what a capture of a pid says it lacks
}

func (f *fakeCapture) Warm(pid int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.warms == nil {
		f.warms = map[int]int{}
	}
	f.warms[pid]++
}

func (f *fakeCapture) warmed() map[int]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.warms)
}

func (f *fakeCapture) Capture(pid int) (*dump.Process, error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[int]int{}
	}
	f.calls[pid]++
	defer f.mu.Unlock()
	return &dump.Process{PID: pid, State: "S (sleeping)", Errors: f.errors[pid], Threads: []stack.Thread{{TID: pid, Name: "python3",
		Native: []stack.Frame{{Func: "cudaStreamSynchronize", Module: "libcudart.so.12"}, {Func: "main", Module: "python3"}}}}}, nil
}

func (f *fakeCapture) count(pid int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[pid]
}

// bed is an agent with a fake clock, environment and tracer.
type bed struct {
	*Agent
	clock   int64
	tracer  *fakeTracer
	capture *fakeCapture
	dir     string
	mu      sync.Mutex
	reports []Report
	envs    map[int]map[string]string
	killed  []int
}

func newBed(t *testing.T, host, dir string, envs map[int]map[string]string, mod func(*Options)) *bed {
	t.Helper()
	b := &bed{clock: 1 * sec, tracer: &fakeTracer{}, capture: &fakeCapture{}, dir: dir, envs: envs}
	o := Options{
		Settings: Settings{HangTimeout: 2 * time.Second, TimelinePath: dir, JobName: "job1"},
		Tracer:   b.tracer, Capturer: b.capture, Hostname: host,
		Monotonic: func() int64 { b.mu.Lock(); defer b.mu.Unlock(); return b.clock },
		Environ: func(pid int) (map[string]string, error) {
			if e, ok := b.envs[pid]; ok {
				return e, nil
			}
			return nil, fmt.Errorf("environ %d: no such process", pid)
		},
		Alive: func(int) bool { return true },
		Kill: func(pid int) error {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.killed = append(b.killed, pid)
			return nil
		},
		OnReport: func(r Report) { b.mu.Lock(); defer b.mu.Unlock(); b.reports = append(b.reports, r) },
	}
	if mod != nil {
		mod(&o)
	}
	b.Agent = New(o)
	return b
}

// looked makes the looks at new processes that the resolver makes on its
// goroutine while Run runs (the next Tick makes them too).
func (b *bed) looked() { b.resolveAll(b.book.Unread) }

func (b *bed) at(t int64) { b.mu.Lock(); b.clock = t; b.mu.Unlock() }

func (b *bed) events(kind Event) []Report {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Report
	for _, r := range b.reports {
		if r.Event == kind {
			out = append(out, r)
		}
	}
	return out
}

func env(rank, world int) map[string]string {
	return map[string]string{"RANK": fmt.Sprint(rank), "LOCAL_RANK": fmt.Sprint(rank), "WORLD_SIZE": fmt.Sprint(world),
		"LOCAL_WORLD_SIZE": fmt.Sprint(world), "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
}

// work makes pid launch a kernel on stream 5 at t and block in
// cudaStreamSynchronize; done says whether the synchronize returns.
func work(a *Agent, pid int, t int64, done bool) {
	a.HandleEvent(timer.Event{Time: t, PID: pid, TID: pid, Kind: timer.KindLaunch, Stream: 5, Kernel: "gemm_bf16_kernel"})
	a.HandleEvent(timer.Event{Time: t + 1, PID: pid, TID: pid, Kind: timer.KindStreamSynchronize, Phase: timer.PhaseEnter, Stream: 5})
	if done {
		a.HandleEvent(timer.Event{Time: t + 2, PID: pid, TID: pid, Kind: timer.KindStreamSynchronize, Phase: timer.PhaseExit, Stream: 5})
	}
}

// The tracer's goroutine reads no /proc: events, however new their
// processes, read no environment, parent or scope; the resolver does,
// once per process, and the ranks are known from then.
func TestEventsReadNoProc(t *testing.T) {
	var mu sync.Mutex
	reads := 0
	read := func() { mu.Lock(); reads++; mu.Unlock() }
	b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{100: env(0, 2), 101: env(1, 2)}, func(o *Options) {
		environ := o.Environ
		o.Environ = func(pid int) (map[string]string, error) { read(); return environ(pid) }
		o.Parent = func(int) (int, bool) { read(); return 1, true }
		o.Inspect = func(pid int) ranks.Process { read(); return ranks.Process{Cmdline: []string{"python3"}} }
		o.Scope = &ranks.Scope{Command: regexp.MustCompile("python")}
	})
	work(b.Agent, 100, sec, false)
	b.HandleEvents([]timer.Event{{Time: sec, PID: 101, TID: 101, Kind: timer.KindLaunch, Stream: 5}, {Time: sec + 1, PID: 101, TID: 101, Kind: timer.KindCommInit, Rank: 1, NRanks: 2}})
	b.HandleEvent(timer.Event{Time: sec + 2, PID: 100, TID: 100, Kind: timer.KindProcessExec})
	if reads != 0 {
		t.Fatalf("%d reads of /proc on the tracer's goroutine", reads)
	}
	b.Tick(context.Background())
	if reads != 2*3 {
		t.Errorf("%d reads of /proc, want 3 for each of 2 processes", reads)
	}
	if rs := b.events(EventRank); len(rs) != 2 || *rs[0].Rank+*rs[1].Rank != 1 {
		t.Errorf("rank reports %+v", rs)
	}
}

func TestHangDumpsEveryRank(t *testing.T) {
	dir := t.TempDir()
	b := newBed(t, "node-a", dir, map[int]map[string]string{100: env(0, 3), 101: env(1, 3), 102: env(2, 3)}, nil)
	ctx := context.Background()
	work(b.Agent, 100, 1*sec, true)
	work(b.Agent, 101, 1*sec, false)
	work(b.Agent, 102, 1*sec, true)
	// The healthy ranks keep working (an idle peer of a waiting rank would
	// be a host stall).
	work(b.Agent, 100, 3*sec, true)
	work(b.Agent, 102, 3*sec, true)

	b.at(2 * sec) // before the timeout: nothing
	b.Tick(ctx)
	if len(b.events("hang")) != 0 || b.capture.count(101) != 0 {
		t.Fatal("hang before the timeout")
	}
	if got := len(b.events("rank")); got != 3 {
		t.Fatalf("%d rank reports, want 3", got)
	}
	b.at(3*sec + 10)
	b.Tick(ctx)
	hangs := b.events("hang")
	if len(hangs) != 1 || hangs[0].PID != 101 || *hangs[0].Rank != 1 || hangs[0].Kind != "gpu" || hangs[0].Op != "gemm_bf16_kernel" {
		t.Fatalf("hang reports %+v", hangs)
	}
	for rank, pid := range []int{100, 101, 102} {
		f, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(rank, 3)))
		if err != nil {
			t.Fatalf("rank %d: %v", rank, err)
		}
		if f.PID != pid || f.Host != "node-a" || f.State != "S (sleeping)" || len(f.Threads) != 1 || f.WorldSize != 3 {
			t.Errorf("rank %d dump %+v", rank, f)
		}
		wantReason := dumpfile.ReasonPeer
		if rank == 1 {
			wantReason = dumpfile.ReasonHang
			if f.Hang == nil || f.Hang.Oldest == nil || f.Hang.Oldest.Kernel != "gemm_bf16_kernel" {
				t.Errorf("rank 1 decision %+v", f.Hang)
			}
		}
		if f.Reason != wantReason {
			t.Errorf("rank %d reason %q, want %q", rank, f.Reason, wantReason)
		}
		if _, err := os.Stat(filepath.Join(dir, strings.TrimSuffix(dumpfile.Name(rank, 3), ".stacktrace")+".txt")); err != nil {
			t.Errorf("no text dump: %v", err)
		}
		tb, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("%05d-00003.trace.json", rank)))
		if err != nil {
			t.Fatal(err)
		}
		var tr struct{ TraceEvents []map[string]any }
		if err := json.Unmarshal(tb, &tr); err != nil || len(tr.TraceEvents) < 3 {
			t.Errorf("rank %d trace: %v, %d events", rank, err, len(tr.TraceEvents))
		}
	}
	m, err := os.ReadFile(filepath.Join(dir, "hang-job1.marker"))
	if err != nil {
		t.Fatal(err)
	}
	mk, err := dumpfile.ParseMarker(m)
	if err != nil || !slices.Equal(mk.Ranks, []int{1}) || mk.Host != "node-a" {
		t.Fatalf("marker %+v %v", mk, err)
	}
	snap := b.Snapshot()
	if len(snap.Ranks) != 3 || snap.Dumps != 3 || snap.DumpFailures != 0 {
		t.Fatalf("snapshot %+v", snap)
	}
	for _, r := range snap.Ranks {
		if r.Hung != (r.Rank == 1) || !r.DumpStarted || r.DumpSeconds <= 0 {
			t.Errorf("rank %d metrics %+v", r.Rank, r)
		}
	}
	// A later tick dumps nobody again.
	b.at(4 * sec)
	b.Tick(ctx)
	if b.capture.count(100) != 1 || b.capture.count(101) != 1 {
		t.Fatalf("ranks captured again: %v", b.capture.calls)
	}
	// Recovery ends the episode.
	b.HandleEvent(timer.Event{Time: 4*sec + 1, PID: 101, TID: 101, Kind: timer.KindStreamSynchronize, Phase: timer.PhaseExit, Stream: 5})
	b.at(5 * sec)
	b.Tick(ctx)
	if rs := b.events("recovered"); len(rs) != 1 || rs[0].PID != 101 {
		t.Fatalf("recovered reports %+v", rs)
	}
	if snap := b.Snapshot(); snap.Ranks[1].Hung || snap.Ranks[1].DumpStarted {
		t.Fatalf("rank 1 after recovery %+v", snap.Ranks[1])
	}
}

// Each rank's dump is read ahead once, at its first GPU call, and never
// for a process that makes none.
func TestWarmOncePerRank(t *testing.T) {
	b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{100: env(0, 2), 101: env(1, 2), 102: {}}, nil)
	b.Follow(102)
	for i := int64(0); i < 3; i++ {
		work(b.Agent, 100, (1+i)*sec, true)
		work(b.Agent, 101, (1+i)*sec, true)
		b.at((1+i)*sec + sec/2)
		b.Tick(context.Background())
	}
	want := map[int]int{100: 1, 101: 1}
	deadline := time.Now().Add(5 * time.Second) // Warm runs on its own goroutine
	for !maps.Equal(b.capture.warmed(), want) && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := b.capture.warmed(); !maps.Equal(got, want) {
		t.Fatalf("read-aheads by pid %v, want %v", got, want)
	}
}

func TestHealthyJobDumpsNothing(t *testing.T) {
	dir := t.TempDir()
	b := newBed(t, "node-a", dir, map[int]map[string]string{100: env(0, 2), 101: env(1, 2)}, nil)
	for i := int64(0); i < 10; i++ {
		work(b.Agent, 100, (1+i)*sec, true)
		work(b.Agent, 101, (1+i)*sec, true)
		b.at((1+i)*sec + sec/2)
		b.Tick(context.Background())
	}
	b.at(20 * sec) // idle, not waiting: still no hang
	b.Tick(context.Background())
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 || len(b.events("hang")) != 0 {
		t.Fatalf("healthy job: files %v, hangs %v", ents, b.events("hang"))
	}
	for _, r := range b.Snapshot().Ranks {
		if r.Hung || r.DumpStarted {
			t.Fatalf("healthy rank %+v", r)
		}
	}
}

func TestMarkerDumpsOtherNodeOnce(t *testing.T) {
	dir := t.TempDir()
	a := newBed(t, "node-a", dir, map[int]map[string]string{100: env(0, 4), 101: env(1, 4)}, nil)
	b := newBed(t, "node-b", dir, map[int]map[string]string{200: env(2, 4), 201: env(3, 4)}, nil)
	other := newBed(t, "node-c", dir, map[int]map[string]string{300: env(0, 1)}, func(o *Options) { o.JobName = "job2" })
	ctx := context.Background()
	work(a.Agent, 100, 1*sec, false)
	work(a.Agent, 101, 1*sec, true)
	work(b.Agent, 200, 1*sec, true)
	work(b.Agent, 201, 1*sec, true)
	work(other.Agent, 300, 1*sec, true)
	b.at(2 * sec)
	b.Tick(ctx) // nothing yet
	a.at(4 * sec)
	a.Tick(ctx) // rank 0 hangs: node a dumps 0 and 1, writes the marker
	if a.capture.count(100) != 1 || a.capture.count(101) != 1 {
		t.Fatalf("node a captures %v", a.capture.calls)
	}
	a.Tick(ctx) // its own marker does not trigger it again
	if a.capture.count(100) != 1 {
		t.Fatal("agent reacted to its own marker")
	}
	b.at(4 * sec)
	b.Tick(ctx)
	b.Tick(ctx)
	if b.capture.count(200) != 1 || b.capture.count(201) != 1 {
		t.Fatalf("node b captures %v", b.capture.calls)
	}
	f, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(3, 4)))
	if err != nil || f.Reason != dumpfile.ReasonMarker || f.Host != "node-b" {
		t.Fatalf("node b dump %+v %v", f, err)
	}
	if ms := b.events("marker"); len(ms) != 1 || ms[0].From != "node-a" {
		t.Fatalf("marker reports %+v", ms)
	}
	other.Tick(ctx)
	if other.capture.count(300) != 0 {
		t.Fatal("another job's agent dumped on this job's marker")
	}
	// A marker older than the agent's start is ignored.
	late := newBed(t, "node-d", dir, map[int]map[string]string{400: env(0, 4)}, nil)
	past := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, dumpfile.MarkerName("job1")), past, past)
	mk, _ := os.ReadFile(filepath.Join(dir, dumpfile.MarkerName("job1")))
	m, _ := dumpfile.ParseMarker(mk)
	m.Time, m.ID = past, "old"
	nb, _ := json.Marshal(m)
	os.WriteFile(filepath.Join(dir, dumpfile.MarkerName("job1")), nb, 0o644)
	work(late.Agent, 400, 1*sec, true)
	late.Tick(ctx)
	if late.capture.count(400) != 0 {
		t.Fatal("old marker triggered a dump")
	}
}

func TestUnwritableTimelineKeepsRunning(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	dir := filepath.Join(file, "timeline") // a directory below a regular file: never creatable, even by root
	b := newBed(t, "node-a", dir, map[int]map[string]string{100: env(0, 1)}, nil)
	work(b.Agent, 100, 1*sec, false)
	b.at(4 * sec)
	b.Tick(context.Background())
	if len(b.events("hang")) != 1 {
		t.Fatal("no hang")
	}
	if fs := b.events("dump_failed"); len(fs) == 0 {
		t.Fatal("no dump_failed report")
	}
	if s := b.Snapshot(); s.DumpFailures == 0 || s.Dumps != 0 {
		t.Fatalf("snapshot %+v", s)
	}
	// The loop goes on: a new rank's hang is still detected.
	b.envs[101] = env(0, 1)
	work(b.Agent, 101, 4*sec, false)
	b.at(7 * sec)
	b.Tick(context.Background())
	if len(b.events("hang")) != 2 {
		t.Fatal("loop stopped detecting after a failed write")
	}
}

func TestHangKillAfterDump(t *testing.T) {
	dir := t.TempDir()
	var b *bed
	var dumpedBeforeKill bool
	b = newBed(t, "node-a", dir, map[int]map[string]string{100: env(0, 2), 101: env(1, 2)}, func(o *Options) {
		o.HangKill = true
		o.Kill = func(pid int) error {
			_, err := os.Stat(filepath.Join(dir, dumpfile.Name(0, 2)))
			_, err2 := os.Stat(filepath.Join(dir, dumpfile.Name(1, 2)))
			dumpedBeforeKill = err == nil && err2 == nil
			b.killed = append(b.killed, pid)
			return nil
		}
	})
	work(b.Agent, 100, 1*sec, false)
	work(b.Agent, 101, 1*sec, true)
	work(b.Agent, 101, 3*sec, true)
	b.at(4 * sec)
	b.Tick(context.Background())
	b.Tick(context.Background())
	if !slices.Equal(b.killed, []int{100}) {
		t.Fatalf("killed %v, want [100]", b.killed)
	}
	if !dumpedBeforeKill {
		t.Fatal("killed before every rank was dumped")
	}
	if len(b.events("kill")) != 1 {
		t.Fatal("no kill report")
	}
}

func TestNoRankNumberedByOrder(t *testing.T) {
	dir := t.TempDir()
	b := newBed(t, "node-a", dir, map[int]map[string]string{100: {"PATH": "/bin"}, 101: {"PATH": "/bin"}}, nil)
	work(b.Agent, 100, 1*sec, false)
	work(b.Agent, 101, 1*sec, true)
	work(b.Agent, 101, 3*sec, true)
	for i := 0; i < 3; i++ {
		b.Tick(context.Background())
	}
	rs := b.events("rank")
	if len(rs) != 2 || !strings.HasPrefix(rs[0].Identity, "assumed") {
		t.Fatalf("rank reports %+v", rs)
	}
	b.at(4 * sec)
	b.Tick(context.Background())
	f0, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(0, 2)))
	if err != nil {
		t.Fatal(err)
	}
	f1, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	if f0.PID == f1.PID || f0.Reason == f1.Reason {
		t.Fatalf("dumps %d/%s %d/%s", f0.PID, f0.Reason, f1.PID, f1.Reason)
	}
}

// A process gone before its environment was read (a short
// torch.cuda.is_available() child: its exit still queued) is numbered by
// nobody: the one without RANK that lives is rank 0 of 1.
func TestGoneBeforeItsLookIsNoRank(t *testing.T) {
	b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{101: {"PATH": "/bin"}}, func(o *Options) {
		environ := o.Environ
		o.Environ = func(pid int) (map[string]string, error) {
			if pid == 100 {
				return nil, fmt.Errorf("read /proc/100/environ: %w", procfs.ErrNoProcess) // as procfs.Environ says it
			}
			return environ(pid)
		}
	})
	work(b.Agent, 100, 1*sec, true)
	work(b.Agent, 101, 1*sec, true)
	for i := 0; i < 3; i++ {
		b.Tick(context.Background())
	}
	rs := b.events("rank")
	if len(rs) != 1 || rs[0].PID != 101 || *rs[0].Rank != 0 {
		t.Fatalf("rank reports %+v, want pid 101 alone as rank 0", rs)
	}
}

func TestLostEventsReported(t *testing.T) {
	b := newBed(t, "node-a", t.TempDir(), nil, nil)
	b.tracer.stats = ebpf.Stats{Events: 10, Lost: 5, Processes: 1, Probes: 20}
	b.Tick(context.Background())
	b.Tick(context.Background())
	b.tracer.stats.Lost = 7
	b.Tick(context.Background())
	ls := b.events("lost")
	if len(ls) != 2 || ls[0].Lost != 5 || ls[1].Lost != 2 || ls[1].LostTotal != 7 {
		t.Fatalf("lost reports %+v", ls)
	}
	s := b.Snapshot()
	if s.LostEvents != 7 || s.ProbesAttached != 20 || s.AttachedProcesses != 1 {
		t.Fatalf("snapshot %+v", s)
	}
}

func TestRunStopsOnCancel(t *testing.T) {
	b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{100: env(0, 1)}, func(o *Options) { o.Interval = time.Millisecond })
	b.tracer.events = []timer.Event{{Time: 1, PID: 100, TID: 100, Kind: timer.KindLaunch, Stream: 1}}
	b.tracer.ran = make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- b.Run(ctx) }()
	<-b.tracer.ran
	if err := b.Follow(42); err != nil {
		t.Fatal(err)
	}
	// Ranks are announced at the next check.
	for deadline := time.Now().Add(5 * time.Second); len(b.events("rank")) == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(b.events("attach")) != 1 || len(b.events("rank")) != 1 || !slices.Equal(b.tracer.followed, []int{42}) {
		t.Fatalf("reports %+v followed %v", b.reports, b.tracer.followed)
	}
}

// dlroverHung is DLRover's rule: keep the lines starting with
// XPU_TIMER_COMMON_HANG; the worker is hung when there are some and every
// one ends in 1.
func dlroverHung(text string) bool {
	n := 0
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "XPU_TIMER_COMMON_HANG") {
			continue
		}
		n++
		if !strings.HasSuffix(strings.TrimSpace(line), "1") {
			return false
		}
	}
	return n > 0
}

func scrape(t *testing.T, a *Agent) string {
	t.Helper()
	x := metrics.New(metrics.Static{JobName: "job1"})
	x.SetSource(a.Snapshot)
	rec := httptest.NewRecorder()
	x.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

func TestDLRoverRuleOnOurMetrics(t *testing.T) {
	b := newBed(t, "node-a", t.TempDir(), map[int]map[string]string{100: env(0, 2), 101: env(1, 2)}, nil)
	work(b.Agent, 100, 1*sec, true)
	work(b.Agent, 101, 1*sec, true)
	b.at(2 * sec)
	b.Tick(context.Background())
	text := scrape(t, b.Agent)
	if dlroverHung(text) || !strings.Contains(text, `XPU_TIMER_COMMON_HANG{`) {
		t.Fatalf("healthy job reads as hung (or has no hang lines):\n%s", text)
	}
	// Both ranks block on work that never completes.
	work(b.Agent, 100, 3*sec, false)
	work(b.Agent, 101, 3*sec, false)
	b.at(3*sec + 1)
	b.Tick(context.Background())
	if dlroverHung(scrape(t, b.Agent)) {
		t.Fatal("hung before the timeout")
	}
	b.at(6 * sec)
	b.Tick(context.Background())
	text = scrape(t, b.Agent)
	if !dlroverHung(text) {
		t.Fatalf("hung job reads as healthy:\n%s", text)
	}
	for _, want := range []string{`XPU_TIMER_COMMON_START_DUMP{`, `XPU_TIMER_COMMON_END_DUMP{`, `rank="1"`} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// Follow takes the processes already under the followed pid at once: the
// ranks among them (RANK in their environment) are announced at the next
// tick though none makes a GPU call after the attach (a job hung before
// the agent came); the launcher above them, with no rank, is none.
func TestFollowTakesRunningRanks(t *testing.T) {
	envs := map[int]map[string]string{10: {"PATH": "/bin"}, 11: env(0, 2), 12: env(1, 2), 13: env(1, 2)}
	b := newBed(t, "node-a", t.TempDir(), envs, func(o *Options) {
		// 13 is a DataLoader worker of rank 1 (12).
		o.Descendants = func(pid int) []int {
			if pid != 10 {
				t.Errorf("descendants of %d asked, want 10's", pid)
			}
			return []int{11, 12, 13}
		}
		o.Parent = func(pid int) (int, bool) { return map[int]int{11: 10, 12: 10, 13: 12}[pid], pid != 10 }
	})
	if err := b.Follow(10); err != nil {
		t.Fatal(err)
	}
	b.Tick(context.Background())
	var got []string
	for _, r := range b.events("rank") {
		got = append(got, fmt.Sprintf("%d:%d", r.PID, *r.Rank))
	}
	if want := []string{"11:0", "12:1"}; !slices.Equal(got, want) {
		t.Fatalf("ranks announced %v, want %v", got, want)
	}
	if h := b.book.Helpers(12); !slices.Equal(h, []int{13}) {
		t.Fatalf("helpers of rank 1: %v, want [13]", h)
	}
}

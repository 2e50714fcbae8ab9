//go:build linux && (386 || amd64)

package ebpf

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/xpu-timer/xpu-timer/internal/benchtable"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/timer"
)

const (
	attachRanks  = 8                     // ranks forked per repetition
	attachReps   = 10                    // repetitions per attach mode
	attachWindow = 300                   // ms each rank keeps calling after a dlopen
	attachTarget = 50 * time.Millisecond // issue 12: ld.so's report to every probe attached
)

// BenchmarkAttachLatency measures how soon a library a process dlopens is
// probed. A followed parent forks 8 ranks, attachReps times; each rank
// dlopens a libcudart.so.12 and then a libnccl.so.2 of its own (fresh
// copies, so every load is a first load for the tracer: 8 attaches at
// once) and calls each at once, then every 0.5 ms. Per load it reports:
//   - attach latency: from ld.so's report of the new library (the BPF time
//     of the last loader record inside the dlopen) to the tracer's "attach"
//     notice for that file, made when every probe of it was in;
//   - first call: from the dlopen's return in the rank to the first call
//     of it recorded, and how many first calls (the one made at once) were
//     caught.
//
// Once with uprobe_multi links, once with single uprobes (SingleProbes).
func BenchmarkAttachLatency(b *testing.B) {
	privileged.Root(b)
	bed := testbed.Build(b)
	prog := gcc(b, filepath.Join(b.TempDir(), "dlbench"), "testdata/dlbench.c", "-ldl")
	for range b.N {
		var res [2]attachResult
		for i, single := range []bool{false, true} {
			res[i] = attachRun(b, bed, prog, single)
		}
		for _, r := range res {
			b.Logf("%s, %d loads (%d ranks x %d repetitions x 2 libraries):\n"+
				"  attach latency (ld.so report -> attach notice): %s; %d attached before ld.so's report (counted 0)\n"+
				"  dlopen return -> first call recorded: %s\n"+
				"  first calls caught: %d of %d (cudart %d of %d, nccl %d of %d)",
				r.mode, r.loads, attachRanks, attachReps, dist(r.attach), r.early, dist(r.firstCall),
				r.caught["cudart"]+r.caught["nccl"], r.loads, r.caught["cudart"], r.loads/2, r.caught["nccl"], r.loads/2)
		}
		m, s := res[0], res[1]
		b.ReportMetric(benchtable.Quantile(m.attach, 0.5), m.mode+"-attach-p50-ms")
		b.ReportMetric(benchtable.Quantile(m.attach, 0.9), m.mode+"-attach-p90-ms")
		b.ReportMetric(slices.Max(m.attach), m.mode+"-attach-max-ms")
		b.ReportMetric(benchtable.Quantile(s.attach, 0.5), s.mode+"-attach-p50-ms")
		b.ReportMetric(benchtable.Quantile(s.attach, 0.9), s.mode+"-attach-p90-ms")
		b.ReportMetric(slices.Max(s.attach), s.mode+"-attach-max-ms")
		target := float64(attachTarget) / float64(time.Millisecond)
		for _, r := range res {
			p90, worst := benchtable.Quantile(r.attach, 0.9), slices.Max(r.attach)
			benchtable.Row(b, "attach latency p90, "+r.mode, ms(p90), ms(target)+" (target)", p90/target)
			benchtable.Row(b, "attach latency max, "+r.mode, ms(worst), ms(target)+" (target)", worst/target)
			n := r.caught["cudart"] + r.caught["nccl"]
			benchtable.Row(b, "first calls caught, "+r.mode, fmt.Sprintf("%d of %d", n, r.loads), fmt.Sprintf("%d (all)", r.loads),
				float64(n)/float64(r.loads))
		}
		benchtable.Row(b, "attach latency median, uprobe_multi vs single uprobes",
			ms(benchtable.Quantile(m.attach, 0.5))+" ("+m.mode+")", ms(benchtable.Quantile(s.attach, 0.5))+" ("+s.mode+")",
			benchtable.Quantile(m.attach, 0.5)/benchtable.Quantile(s.attach, 0.5))
	}
}

// attachResult is what one attach mode measured; latencies in ms.
type attachResult struct {
	mode      string
	loads     int
	attach    []float64
	early     int // loads whose probes were in before ld.so's report
	firstCall []float64
	caught    map[string]int // first calls caught, by library
}

var dlbenchLine = regexp.MustCompile(`^rank=(\d+) pid=(\d+) lib=(\w+) before=(\d+) ret=(\d+) first=(\d+) calls=(\d+)$`)

// load is one dlopen of one rank, as the rank printed it.
type load struct {
	pid                int
	lib, path          string
	before, ret, first int64 // CLOCK_MONOTONIC ns
}

// attachRun runs the ranks attachReps times under one Tracer.
func attachRun(b *testing.B, bed *testbed.Bed, prog string, single bool) attachResult {
	b.Helper()
	tr, err := NewTracer(Options{SingleProbes: single, Linger: 100 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	res := attachResult{mode: "single-uprobes", caught: map[string]int{}}
	if tr.multi {
		res.mode = "uprobe_multi"
	} else if !single {
		b.Fatal("this kernel has no uprobe_multi links (Linux 6.6+): both runs would measure single uprobes")
	}

	var mu sync.Mutex
	loader := map[int][]int64{}                // pid -> BPF times of its loader records
	attached := map[string]int64{}             // library path -> CLOCK_MONOTONIC ns of its attach notice
	calls := map[[2]int][]int64{}              // pid, kind -> BPF times of its calls
	tr.f.onLoader = func(pid int, kt uint64) { // under f.mu, on the follower's goroutine
		mu.Lock()
		loader[pid] = append(loader[pid], int64(kt))
		mu.Unlock()
	}
	off := monoOffset()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- tr.Run(ctx, func(evs []timer.Event) {
			mu.Lock()
			defer mu.Unlock()
			for _, ev := range evs {
				if ev.Kind == timer.KindLaunch || ev.Kind == timer.KindGroupStart {
					k := [2]int{ev.PID, int(ev.Kind)}
					calls[k] = append(calls[k], ev.Time)
				}
			}
		}, func(n Notice) {
			if n.Kind == "attach" {
				mu.Lock()
				attached[n.Library] = n.Time.UnixNano() - off
				mu.Unlock()
			}
		})
	}()
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	defer stop()

	p := start(b, prog, strconv.Itoa(attachRanks), strconv.Itoa(attachWindow))
	p.until(b, "ready")
	if err := tr.Follow(p.pid()); err != nil {
		b.Fatal(err)
	}
	root, err := filepath.EvalSymlinks(b.TempDir()) // as /proc/PID/maps names the copies
	if err != nil {
		b.Fatal(err)
	}
	var loads []load
	for rep := range attachReps {
		dir := filepath.Join(root, strconv.Itoa(rep))
		for k := range attachRanks {
			for _, lib := range []string{"libcudart.so.12", "libnccl.so.2"} {
				copyFile(b, bed.Lib(lib), filepath.Join(dir, strconv.Itoa(k), lib))
			}
		}
		p.send(b, dir)
		for _, l := range p.until(b, "done") {
			m := dlbenchLine.FindStringSubmatch(l)
			if m == nil {
				b.Fatalf("dlbench printed %q", l)
			}
			pid, _ := strconv.Atoi(m[2])
			n := func(s string) int64 { v, _ := strconv.ParseInt(s, 10, 64); return v }
			file := map[string]string{"cudart": "libcudart.so.12", "nccl": "libnccl.so.2"}[m[3]]
			loads = append(loads, load{pid: pid, lib: m[3], path: filepath.Join(dir, m[1], file),
				before: n(m[4]), ret: n(m[5]), first: n(m[6])})
		}
		// Each repetition measures 8 loads at once, not a backlog the
		// tracer still works on from the one before.
		settle(b, tr)
	}
	stop()
	if st := tr.Stats(); st.Lost != 0 {
		b.Fatalf("%s: %d events lost", res.mode, st.Lost)
	}
	if want := attachRanks * attachReps * 2; len(loads) != want {
		b.Fatalf("%s: %d loads reported, want %d", res.mode, len(loads), want)
	}

	mu.Lock()
	defer mu.Unlock()
	var noLoader, noAttach, noCall []string
	for _, l := range loads {
		before, ret, first := l.before, l.ret, l.first
		res.loads++
		// ld.so's report that the library is mapped: its last loader
		// record inside the dlopen (the first one announces the change).
		var dl int64
		for _, t := range loader[l.pid] {
			if t >= before && t <= ret {
				dl = t
			}
		}
		at, ok := attached[l.path]
		switch {
		case dl == 0:
			noLoader = append(noLoader, l.path)
		case !ok: // never attached while the rank lived: counted as infinite
			noAttach = append(noAttach, l.path)
			res.attach = append(res.attach, math.Inf(1))
		default:
			lat := float64(at-dl) / 1e6
			if lat < 0 {
				res.early++
				lat = 0
			}
			res.attach = append(res.attach, lat)
		}
		kind := timer.KindLaunch
		if l.lib == "nccl" {
			kind = timer.KindGroupStart
		}
		ts := calls[[2]int{l.pid, int(kind)}]
		if len(ts) == 0 {
			noCall = append(noCall, l.path)
			res.firstCall = append(res.firstCall, math.Inf(1))
			continue
		}
		firstSeen := slices.Min(ts)
		if firstSeen <= first {
			res.caught[l.lib]++
		}
		res.firstCall = append(res.firstCall, float64(firstSeen-ret)/1e6)
	}
	if len(noLoader)+len(noAttach)+len(noCall) > 0 {
		b.Logf("%s: no loader record inside the dlopen for %d loads (left out), no attach notice while the rank lived for %d, no call recorded within %d ms for %d; e.g. %v %v %v",
			res.mode, len(noLoader), len(noAttach), attachWindow, len(noCall), firstFew(noLoader), firstFew(noAttach), firstFew(noCall))
	}
	if len(res.attach) == len(noAttach) || len(res.firstCall) == len(noCall) {
		b.Fatalf("%s: measured nothing: %d attach latencies, %d first-call latencies of %d loads",
			res.mode, len(res.attach)-len(noAttach), len(res.firstCall)-len(noCall), res.loads)
	}
	return res
}

// settle waits until the tracer has handled the exits of the ranks (only
// the parent is followed), read what came before them, and detached the
// ranks' libraries (Linger is short here): the next repetition then
// measures 8 loads at once on an idle tracer, not a backlog or detaches
// left over from the one before.
func settle(b *testing.B, tr *Tracer) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for st := tr.Stats(); st.Processes > 1 || st.Idle > 0; st = tr.Stats() {
		if time.Now().After(deadline) {
			b.Fatalf("2 minutes after the ranks exited the tracer still follows %d processes and holds %d idle probes", st.Processes, st.Idle)
		}
		time.Sleep(pollInterval)
	}
	tr.f.closing.Wait()          // the detaches
	time.Sleep(2 * pollInterval) // the notices made with the last exits
}

// monoOffset is CLOCK_REALTIME minus CLOCK_MONOTONIC in ns, to put a
// time.Time on the clock of bpf_ktime_get_ns: the tightest of a few reads.
func monoOffset() int64 {
	var off, best int64 = 0, math.MaxInt64
	for range 5 {
		var a, c unix.Timespec
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &a)
		w := time.Now().UnixNano()
		_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &c)
		if d := c.Nano() - a.Nano(); d < best {
			best, off = d, w-(a.Nano()+c.Nano())/2
		}
	}
	return off
}

func copyFile(b *testing.B, from, to string) {
	b.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		b.Fatal(err)
	}
}

// dist prints the distribution of latencies in ms; "never" stands for a
// load whose library was not attached (or no call of it recorded) while
// the rank lived.
func dist(v []float64) string {
	if len(v) == 0 {
		return "no samples"
	}
	never := 0
	for _, x := range v {
		if math.IsInf(x, 1) {
			never++
		}
	}
	return fmt.Sprintf("n=%d min %s median %s p90 %s max %s, never %d",
		len(v), ms(slices.Min(v)), ms(benchtable.Quantile(v, 0.5)), ms(benchtable.Quantile(v, 0.9)), ms(slices.Max(v)), never)
}

func ms(v float64) string {
	if math.IsInf(v, 1) {
		return "never"
	}
	return fmt.Sprintf("%.2f ms", v)
}

// firstFew is the start of a list of files, for a log line.
func firstFew(v []string) []string { return v[:min(len(v), 3)] }

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/trace"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/viewer/rankset"
)

const (
	nproc     = 4
	faultStep = 3
	timeout   = 3 * time.Second
	// slack is how long after the timeout a hang may be decided: the
	// check runs once a second.
	slack = 2 * time.Second
)

// job is one fake training job.
type job struct {
	vendor string // "" is cuda
	fault  string // "" is healthy
	rank   int    // the faulty rank
	steps  int
	at     *int     // the fault's step; nil is faultStep
	extra  []string // more run.py arguments
}

// step is the step at which the fault strikes.
func (j job) step() int {
	if j.at != nil {
		return *j.at
	}
	return faultStep
}

// args is the job's command line.
func (j job) args(b *testbed.Bed) []string {
	steps := j.steps
	if steps == 0 {
		steps = 30
	}
	o := testbed.JobOptions{NProc: nproc, Steps: steps, Vendor: j.vendor, Fault: j.fault, FaultRank: j.rank, FaultStep: j.step(), Args: j.extra}
	return b.JobCommand(o).Args
}

// launch starts the job under xpu_timer_launch with a 3 s timeout, dumps
// into dir and metrics on a free port.
func launch(t testing.TB, b *testbed.Bed, j job, dir string, hangTimeout time.Duration, env ...string) *proc {
	t.Helper()
	args := append([]string{bins.launch, "--hang-timeout", hangTimeout.String(), "--timeline-path", dir, "--port", "0"}, j.args(b)...)
	return start(t, args, env...)
}

// named is XPU_TIMER_LIBRARIES naming the testbed's libraries, so that
// they are probed before the job maps them (TestNamedLibraries). Found in
// a process's maps instead, as most users' are, a library is probed while
// the loader holds the process that mapped it (ebpf/hold_linux.go): both
// ways see the job's first calls (ncclGetUniqueId, ncclCommInitRank).
func named(b *testbed.Bed, vendor string) string {
	names := []string{"libcuda.so.1", "libnccl.so.2"} // the CUDA runtime is probed in its driver
	if vendor == "maca" {
		names = []string{"libmcruntime.so.2", "libmccl.so.2"}
	}
	var libs []string
	for _, l := range names {
		libs = append(libs, b.Lib(l))
	}
	return "XPU_TIMER_LIBRARIES=" + strings.Join(libs, ",")
}

// hangLine is a decision as the launcher logs it.
type hangLine struct {
	at         time.Time
	rank       int
	kind, op   string
	ageSeconds float64
	text       string // the whole line
}

var hangRe = regexp.MustCompile(`level=WARN msg=hang .* rank=(\d+) kind=(\w+) op=(\S*) .*age=([0-9.]+)`)

// decidedRanks is the set of ranks decided hung so far.
func decidedRanks(p *proc) map[int]bool {
	m := map[int]bool{}
	for _, h := range hangLines(p) {
		m[h.rank] = true
	}
	return m
}

func hangLines(p *proc) []hangLine {
	var out []hangLine
	for _, l := range p.matching(hangRe) {
		m := hangRe.FindStringSubmatch(l.Text)
		r, _ := strconv.Atoi(m[1])
		age, _ := strconv.ParseFloat(m[4], 64)
		out = append(out, hangLine{at: l.At, rank: r, kind: m[2], op: m[3], ageSeconds: age, text: l.Text})
	}
	return out
}

var dumpedRe = regexp.MustCompile(`msg="dumped ranks" .*ranks=(\d+) of=(\d+) seconds=([0-9.e-]+)`)

// faultCase is one fault and what the detector must make of it.
type faultCase struct {
	job
	host bool     // rank is stuck on the host (no GPU call), the others on the GPU
	env  []string // more environment for the launcher
	// finding is what summary.txt must say of the faulty rank (%d), as a
	// regular expression.
	finding string
	// workers is how many data loader worker processes each rank forks
	// (run.py --workers): they must be helpers, dumped inside their
	// rank's dump, never ranks, files or series of their own.
	workers int
}

// What the viewer must find, by fault.
const (
	// The sequence numbers show the rank behind its peers.
	// The ranks known to wait are those whose communicator creation the
	// probes saw: all the others, or fewer (one) when some created theirs
	// before the probes landed (docs/limits.md, "Early warning").
	behind = `\[behind\] rank %d never issued AllReduce #\d+ on comm .*, (ranks [-/0-9]+ wait|rank \d+ waits) in it`
	// The engine found the rank silent on the host while its peers wait.
	silent = `\[host\] rank %d made no GPU call for \d+s while its peers wait`
	// The probes saw the rank's compute work outstanding past the timeout
	// while its peers' is known complete up to the collective they wait
	// in (the watchdog saw its start event ready). No host thread runs a
	// kernel on a real GPU: the stacks show none. The kernel is the oldest
	// not known complete (the step's first, not the one that spins); it
	// has no name or handle when the runtime looked it up before the
	// probes landed (docs/limits.md, "Where CUDA is probed").
	inKernel = `\[kernel\] rank %d hangs in kernel( \S+)? \(stream 0x[0-9a-f]+, not a collective\), while ranks [-/0-9]+ wait in (AllReduce #\d+ on comms? .+|collectives \(.+\)) \[a kernel outstanding \d+s, past the \d+s timeout\]`
)

// noCulprit is what the viewer must say of a fault no evidence tells apart.
const noCulprit = "Likely culprit: none named"

// indistinct reports whether a fault leaves no evidence of its rank: an
// NCCL stall on CUDA (a dead NIC under one rank's collective) is, to the
// probes, every rank having issued and started the collective and none
// completing it, and the thread that polls the dead queue is the driver's
// or NCCL's, as on every rank of a real GPU (docs/limits.md, "Telling
// the rank by its kernel"). The viewer must then name no rank rather than
// a healthy one.
func indistinct(vendor, fault string) bool {
	return fault == testbed.FaultNCCLStall && vendor != "maca"
}

// TestFaults runs each fault kind (and one on MACA) under xpu_timer_launch
// and checks everything a hang must produce: decisions on the stuck ranks
// within the timeout plus the check period, dumps of all four ranks with
// native and Python stacks, a flight recorder trace, the hang metrics,
// DLRover's verdict, the viewer naming the faulty rank, and a clean end.
func TestFaults(t *testing.T) {
	privileged.Root(t)
	b := testbed.Build(t)
	cases := []faultCase{
		{job: job{fault: testbed.FaultSkipCollective, rank: 2}, finding: behind},
		{job: job{fault: testbed.FaultKernelHang, rank: 1}, finding: inKernel},
		{job: job{fault: testbed.FaultPythonSleep, rank: 3}, host: true, finding: silent},
		{job: job{fault: testbed.FaultDeadlock, rank: 0}, host: true, finding: silent},
		{job: job{fault: testbed.FaultDataloader, rank: 2}, host: true, finding: silent},
		{job: job{fault: testbed.FaultDataloaderWorker, rank: 1, extra: []string{"--workers", "2"}}, host: true, finding: silent, workers: 2},
		{job: job{fault: testbed.FaultNCCLStall, rank: 1}}, // indistinct: no rank may be named
		{job: job{vendor: "maca", fault: testbed.FaultSkipCollective, rank: 3}, finding: behind},
	}
	var report []string
	for _, c := range cases {
		name := c.fault
		if c.vendor != "" {
			name = c.vendor + "/" + name
		}
		t.Run(name, func(t *testing.T) {
			report = append(report, fmt.Sprintf("%-28s %s", name, checkFault(t, b, c)))
		})
	}
	t.Logf("detection and dump times (latency: decision age past the %v timeout, worst rank; wall: hang logged after the first rank ended the last good step, minus the timeout):\n%s",
		timeout, strings.Join(report, "\n"))
}

// TestNamedLibraries names the testbed's libraries (--libraries, here
// through XPU_TIMER_LIBRARIES), so they are probed before any rank maps
// them: the whole fault check passes as on the default path.
func TestNamedLibraries(t *testing.T) {
	privileged.Root(t)
	b := testbed.Build(t)
	c := faultCase{job: job{fault: testbed.FaultSkipCollective, rank: 1}, finding: behind, env: []string{named(b, "")}}
	t.Logf("%s", checkFault(t, b, c))
}

func checkFault(t *testing.T, b *testbed.Bed, c faultCase) string {
	dir := t.TempDir()
	p := launch(t, b, c.job, dir, timeout, c.env...)
	url := p.metricsURL(30 * time.Second)

	// The decisions and the dumps.
	dl := p.waitRe(dumpedRe, 60*time.Second)
	m := dumpedRe.FindStringSubmatch(dl.Text)
	if m[1] != strconv.Itoa(nproc) || m[2] != strconv.Itoa(nproc) {
		t.Fatalf("dumped %s ranks of %s, want all %d: %s", m[1], m[2], nproc, dl.Text)
	}
	dumpSeconds, _ := strconv.ParseFloat(m[3], 64)
	// Every rank is stuck: the faulty one, and its peers waiting for it in
	// a collective. Their decisions may straddle two checks.
	p.until("a decision on every rank", 2*slack, func() bool { return len(decidedRanks(p)) == nproc })
	hangs := hangLines(p)
	wantKind := "gpu"
	if c.host {
		wantKind = "host"
	}
	for _, h := range hangs {
		if h.rank == c.rank && h.kind != wantKind {
			t.Errorf("faulty rank %d decided a %s hang, want %s", c.rank, h.kind, wantKind)
		}
	}
	latency, wall := detection(t, p, c, hangs)

	// Dumps of every rank, with stacks.
	var stopped time.Duration
	for r := range nproc {
		f := checkDump(t, dir, r)
		stopped = max(stopped, f.StoppedFor)
	}
	for r := range nproc {
		checkTrace(t, dir, r)
	}

	// Metrics: the compatibility family, our own, and DLRover's verdict.
	checkHangMetrics(t, url, p, c)

	// The viewer names the faulty rank.
	summary := runViewer(t, dir)
	t.Logf("summary.txt:\n%s", summary)
	if c.workers > 0 {
		checkWorkers(t, url, p, dir, summary, c)
	}
	want := fmt.Sprintf("Likely culprit: rank %d\n", c.rank)
	switch {
	case indistinct(c.vendor, c.fault):
		if !strings.Contains(summary, noCulprit) {
			t.Errorf("summary.txt names a rank where no evidence tells the faulty one apart, want %q:\n%s", noCulprit, summary)
		}
	case !strings.Contains(summary, want):
		t.Errorf("summary.txt does not say %q:\n%s", strings.TrimSpace(want), summary)
	}
	// Every rank's probes land before its first call into a library it
	// loads (the loader holds it: ebpf/hold_linux.go), so its
	// communicators are known by their ids and the sequence numbers line
	// up.
	if re := regexp.MustCompile(fmt.Sprintf(c.finding, c.rank)); !indistinct(c.vendor, c.fault) && !re.MatchString(summary) {
		t.Errorf("summary.txt lacks the finding %s:\n%s", re, summary)
	}
	if r := unknownComm(summary); r >= 0 {
		t.Errorf("rank %d's communicator is known only by its handle: its ncclCommInitRank was not seen:\n%s", r, summary)
	}

	ending := time.Now()
	code := p.end(30 * time.Second)
	t.Logf("job ended with status %d, xpu_timer_launch exited %v after SIGTERM", code, time.Since(ending).Round(time.Millisecond))
	return fmt.Sprintf("latency %5.2fs  wall %5.2fs  dump of %d ranks %6.1fms (longest stop %v)",
		latency, wall.Seconds(), nproc, dumpSeconds*1000, stopped.Round(time.Microsecond*100))
}

// detection checks that every decision came within the timeout plus the
// check period of the stuck op, and returns the worst decision age past
// the timeout (the age counts from the oldest op not known complete, issued
// no later than the stuck one) and the worst wall-clock delay: hang logged,
// minus the time the first rank printed the end of the last good step,
// minus the timeout. Both are upper bounds: every stuck op was issued after
// that line.
func detection(t *testing.T, p *proc, c faultCase, hangs []hangLine) (float64, time.Duration) {
	t.Helper()
	var latency float64
	var wall time.Duration
	done := p.stepDone(faultStep - 1)
	var first time.Time // when the first rank finished the last good step
	for r := range nproc {
		at, ok := done[r]
		if !ok {
			t.Fatalf("rank %d never finished step %d\n%s", r, faultStep-1, p.output())
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	decided := map[int]bool{}
	for _, h := range hangs {
		if decided[h.rank] {
			continue
		}
		decided[h.rank] = true
		past := h.ageSeconds - timeout.Seconds()
		latency = max(latency, past)
		wall = max(wall, h.at.Sub(first)-timeout)
		if past < 0 || past > slack.Seconds() {
			t.Errorf("rank %d decided %.2fs past the timeout, want within %v", h.rank, past, slack)
		}
		t.Logf("rank %d: %s hang, op %s, age %.2fs at decision (%.2fs past the timeout), logged %.2fs after step %d ended",
			h.rank, h.kind, h.op, h.ageSeconds, past, h.at.Sub(first).Seconds(), faultStep-1)
	}
	// The step lines pass through a pipe and the test's reader: allow for
	// that beyond the slack.
	if wall > slack+500*time.Millisecond {
		t.Errorf("a decision was logged %v past the timeout counted from the end of step %d, want within %v", wall, faultStep-1, slack)
	}
	return latency, wall
}

// checkDump reads rank r's dump and checks its files and main thread.
func checkDump(t *testing.T, dir string, r int) *dumpfile.File {
	t.Helper()
	name := dumpfile.Name(r, nproc)
	f, err := dumpfile.Read(filepath.Join(dir, name))
	if err != nil {
		t.Fatalf("rank %d: %v", r, err)
	}
	base := strings.TrimSuffix(name, ".stacktrace")
	for _, extra := range []string{base + ".txt", trace.Name(r, nproc)} {
		if st, err := os.Stat(filepath.Join(dir, extra)); err != nil || st.Size() == 0 {
			t.Errorf("rank %d: %s missing or empty (%v)", r, extra, err)
		}
	}
	if f.Rank != r || f.WorldSize != nproc || f.PID == 0 {
		t.Errorf("rank %d dump names rank %d of %d pid %d", r, f.Rank, f.WorldSize, f.PID)
	}
	var main *struct {
		native, python int
		err            string
	}
	for _, th := range f.Threads {
		if th.TID == f.PID {
			main = &struct {
				native, python int
				err            string
			}{len(th.Native), len(th.Python), th.Error}
		}
	}
	if main == nil || main.native == 0 || main.python == 0 {
		t.Errorf("rank %d: main thread stacks %+v, want native and Python frames; errors %v", r, main, f.Errors)
	}
	checkUnwoundPastProbes(t, r, f)
	return f
}

// checkUnwoundPastProbes checks that every thread blocked in a call we
// put a return probe on (a synchronize, a copy) unwinds past the kernel's
// uretprobe trampoline to the interpreter's main (_start), through
// libffi, where it would otherwise stop.
func checkUnwoundPastProbes(t *testing.T, r int, f *dumpfile.File) {
	t.Helper()
	probed := regexp.MustCompile(`^(cuda|mc)(Memcpy|StreamSynchronize|EventSynchronize|DeviceSynchronize)$`)
	for _, th := range f.Threads {
		in := ""
		for _, fr := range th.Native {
			if probed.MatchString(fr.Func) {
				in = fr.Func
				break
			}
		}
		if in == "" {
			continue
		}
		last := th.Native[len(th.Native)-1]
		if strings.Contains(th.Error, "uretprobe") || (th.TID == f.PID && last.Func != "_start") {
			t.Errorf("rank %d thread %d blocked in %s: native stack ends at %s (%s), error %q, want it unwound past the return probe to _start",
				r, th.TID, in, last.Func, last.Module, th.Error)
		}
	}
}

// checkTrace checks the flight recorder trace of rank r: valid Chrome trace
// JSON holding the last steps: launches, collectives numbered up to the
// last one the rank issued, completions and waits.
func checkTrace(t *testing.T, dir string, r int) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, trace.Name(r, nproc)))
	if err != nil {
		t.Fatal(err)
	}
	var tf trace.File
	if err := json.Unmarshal(raw, &tf); err != nil {
		t.Fatalf("rank %d trace is not JSON: %v", r, err)
	}
	f, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(r, nproc)))
	if err != nil {
		t.Fatal(err)
	}
	cats := map[string]int{}
	var seqs []uint64
	for _, e := range tf.TraceEvents {
		cats[e.Cat]++
		if e.Cat == "collective" {
			seq, _ := e.Args["seq"].(float64)
			seqs = append(seqs, uint64(seq))
		}
	}
	for _, c := range []string{"launch", "collective", "completion", "wait"} {
		if cats[c] == 0 {
			t.Errorf("rank %d trace has no %q events: %v", r, c, cats)
		}
	}
	var issued uint64
	for _, c := range f.Comms {
		issued = max(issued, c.Issued)
	}
	if len(seqs) == 0 || slices.Max(seqs) != issued || slices.Max(seqs)-slices.Min(seqs) < 3 {
		t.Errorf("rank %d trace collectives numbered %v, want the last steps up to #%d", r, seqs, issued)
	}
}

// checkHangMetrics checks /metrics while the job hangs.
func checkHangMetrics(t *testing.T, url string, p *proc, c faultCase) {
	t.Helper()
	body := mustScrape(t, url)
	s := parseText(body)
	compat := byRank(s, "XPU_TIMER_COMMON_HANG")
	hung := map[string]float64{}
	kinds := map[string]string{}
	for _, x := range s {
		if x.name == "xpu_timer_rank_hung" && x.value == 1 {
			hung[x.labels["rank"]] = 1
			kinds[x.labels["rank"]] = x.labels["kind"]
		}
	}
	decided := map[string]bool{}
	for r := range decidedRanks(p) {
		decided[strconv.Itoa(r)] = true
	}
	for r := range nproc {
		rs := strconv.Itoa(r)
		want := 0.0
		if decided[rs] {
			want = 1
		}
		if v, ok := compat[rs]; !ok || v != want {
			t.Errorf("XPU_TIMER_COMMON_HANG{rank=%q} = %v (present %v), want %v", rs, v, ok, want)
		}
		if hung[rs] != want {
			t.Errorf("xpu_timer_rank_hung{rank=%q} = %v, want %v", rs, hung[rs], want)
		}
	}
	wantKind := "gpu"
	if c.host {
		wantKind = "host"
	}
	if k := kinds[strconv.Itoa(c.rank)]; k != wantKind {
		t.Errorf("faulty rank %d hung with kind %q, want %q", c.rank, k, wantKind)
	}
	for _, fam := range []string{"XPU_TIMER_COMMON_START_DUMP", "XPU_TIMER_COMMON_END_DUMP", "xpu_timer_dump_duration_seconds"} {
		for r, v := range byRank(s, fam) {
			if v <= 0 {
				t.Errorf("%s{rank=%q} = %v after the dump", fam, r, v)
			}
		}
	}
	if v := sum(s, "xpu_timer_dumps_total"); v < nproc {
		t.Errorf("xpu_timer_dumps_total = %v, want at least %d", v, nproc)
	}
	if v := sum(s, "xpu_timer_probe_events_total"); v == 0 {
		t.Error("xpu_timer_probe_events_total is 0")
	}
	if !dlroverHung(body) {
		t.Errorf("DLRover's rule reads every rank hung as not hung:\n%s", grep(body, "XPU_TIMER_COMMON_HANG"))
	}
}

func sum(s []sample, name string) float64 {
	var v float64
	for _, x := range s {
		if x.name == name {
			v += x.value
		}
	}
	return v
}

func grep(text, prefix string) string {
	var out []string
	for l := range strings.SplitSeq(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// runViewer runs xpu_timer_stacktrace_viewer on the dumps and returns
// summary.txt, after checking the other outputs exist.
func runViewer(t *testing.T, dir string) string {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(bins.viewer, "--path", dir, "--out", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("viewer: %v\n%s", err, b)
	}
	for _, f := range []string{"cpp_stack", "py_stack", "cpp_stack.svg", "py_stack.svg"} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("viewer output %s missing or empty (%v)", f, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(out, "summary.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// commLineRe is a communicator's line of the viewer's report: its id (or
// "local:<handle>") and the ranks dumped in it.
var commLineRe = regexp.MustCompile(`^comm (\S+): .*dumped \(ranks? ([-/0-9]+)\)`)

// commUnknown says whether the viewer's report knows rank's communicator
// only by its handle ("comm local:<handle>"): that rank's ncclCommInitRank
// was not seen.
func commUnknown(summary string, rank int) bool {
	seen := false
	for l := range strings.SplitSeq(summary, "\n") {
		m := commLineRe.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		if ranks, err := rankset.Parse(m[2]); err != nil || !slices.Contains(ranks, rank) {
			continue
		}
		if !strings.HasPrefix(m[1], "local:") {
			return false
		}
		seen = true
	}
	return seen
}

// unknownComm is the first of the job's ranks whose communicator the
// report knows only by its handle, or -1.
func unknownComm(summary string) int {
	for r := range nproc {
		if commUnknown(summary, r) {
			return r
		}
	}
	return -1
}

// TestCommUnknown reads the communicator lines of reports: the one of a
// run where ranks 0 and 2 created their communicator unseen, one where
// every rank's was seen, and one where none was.
func TestCommUnknown(t *testing.T) {
	partial := `Communicators:
  comm 0e2305d7bef3deb064a363a43f75d4a0: 4 ranks, 2 dumped (ranks 1/3)
    issued:    2 ranks launched up to op 12
  comm local:55691d505770: 0 ranks, 1 dumped (ranks 2)
  comm local:556982275e50: 0 ranks, 1 dumped (ranks 0)
`
	seen := "  comm 0e2305d7bef3deb064a363a43f75d4a0: 4 ranks, 4 dumped (ranks 0-3)\n"
	none := "  comm local:55691d505770: 0 ranks, 1 dumped (ranks 2)\n  comm local:556982275e50: 0 ranks, 3 dumped (ranks 0-1/3)\n"
	for _, c := range []struct {
		name, summary string
		rank          int
		want          bool
	}{
		{"partial, rank 2", partial, 2, true},
		{"partial, rank 0", partial, 0, true},
		{"partial, rank 1", partial, 1, false},
		{"all seen", seen, 2, false},
		{"none seen", none, 2, true},
		{"none seen, rank 3", none, 3, true},
		{"no communicator", "Ranks with no dump: none\n", 2, false},
	} {
		if got := commUnknown(c.summary, c.rank); got != c.want {
			t.Errorf("%s: commUnknown = %v, want %v", c.name, got, c.want)
		}
	}
}

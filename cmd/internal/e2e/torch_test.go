package e2e

import (
	"net"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
)

// torchPython is the interpreter Debian's python3-torch is built for.
const torchPython = "/usr/bin/python3"

// torchTimeout is the hang timeout of the real-PyTorch tier: long enough
// that a loaded machine's slow steps are not mistaken for a stall. A
// shorter one is no fair test of a CPU job on a busy 2-CPU machine, the
// healthy one's included: there every rank may stand still for over 3 s
// (docs/measurements.md, "two e2e flakes"), a stall by the rule.
const torchTimeout = 10 * time.Second

var (
	torchStepRe  = regexp.MustCompile(`xpu-torchjob rank=(\d+) step=(\d+) done`)
	rankLineRe   = regexp.MustCompile(`level=INFO msg=rank .*\bpid=(\d+) rank=(\d+) `)
	torchFaultAt = 5
)

// requireTorch fails (never skips) when Debian's torch is missing: make
// deps installs it, and this tier is what tells that real jobs work.
func requireTorch(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(torchPython, "-c", "import torch, torch.distributed").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import torch (python3-torch; make deps installs it): %v\n%s", torchPython, err, out)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// torchJob starts testdata/torchjob/job.py under torchrun (4 ranks, gloo,
// DistributedDataParallel, 2 DataLoader worker processes per rank) under
// xpu_timer_launch on the default path.
func torchJob(t *testing.T, dir string, timeout time.Duration, jobArgs ...string) *proc {
	t.Helper()
	root, err := filepath.Abs("../../../testdata/torchjob/job.py")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{bins.launch, "--hang-timeout", timeout.String(), "--timeline-path", dir, "--port", "0",
		torchPython, "-m", "torch.distributed.run", "--nproc_per_node", strconv.Itoa(nproc), "--redirects", "1", "--tee", "1",
		"--master_port", strconv.Itoa(freePort(t)), root, "--workers", "2"}
	return start(t, append(args, jobArgs...))
}

// TestRealPyTorch runs real PyTorch 1.13 jobs (Debian's python3-torch, CPU,
// gloo) under torchrun and xpu_timer_launch, naming no library: no GPU
// probe can see them, so the silent-rank watch must. Rank 2 sleeps in
// Python, deadlocks on two locks, or spins in a Python loop at step 5;
// each hang is decided on every rank within the timeout plus 2 s, every
// rank is dumped once (its DataLoader workers inside its dump, never as
// ranks), and the viewer names rank 2. A healthy job of the same shape
// raises nothing with the same timeout.
func TestRealPyTorch(t *testing.T) {
	privileged.Root(t)
	requireTorch(t)
	t.Run("healthy", func(t *testing.T) {
		dir := t.TempDir()
		p := torchJob(t, dir, torchTimeout, "--steps", "240") // training alone outlasts the timeout
		if code := p.waitExit(3 * time.Minute); code != 0 {
			t.Fatalf("healthy job exited %d\n%s", code, tail(p.output(), 60))
		}
		if hs := hangLines(p); len(hs) > 0 {
			t.Errorf("a healthy job was decided hung: %+v", hs)
		}
		checkFourRanks(t, p)
	})
	for _, fault := range []string{"sleep", "deadlock", "busy"} {
		t.Run(fault, func(t *testing.T) { checkTorchFault(t, fault) })
	}
}

// checkFourRanks checks that the launcher announced exactly one process
// for each of the 4 ranks (the 8 DataLoader workers share their RANK).
func checkFourRanks(t *testing.T, p *proc) {
	t.Helper()
	pids := map[int]string{}
	for _, l := range p.matching(rankLineRe) {
		m := rankLineRe.FindStringSubmatch(l.Text)
		r, _ := strconv.Atoi(m[2])
		if old, ok := pids[r]; ok && old != m[1] {
			t.Errorf("rank %d announced for pids %s and %s", r, old, m[1])
		}
		pids[r] = m[1]
	}
	if len(pids) != nproc {
		t.Errorf("ranks announced %v, want exactly 0-%d", pids, nproc-1)
	}
}

func checkTorchFault(t *testing.T, fault string) {
	dir := t.TempDir()
	p := torchJob(t, dir, torchTimeout, "--steps", "100000", "--fault", fault, "--fault-rank", "2", "--fault-step", strconv.Itoa(torchFaultAt))
	dl := p.waitRe(dumpedRe, 4*time.Minute)
	if m := dumpedRe.FindStringSubmatch(dl.Text); m[1] != strconv.Itoa(nproc) || m[2] != strconv.Itoa(nproc) {
		t.Fatalf("dumped %s ranks of %s, want all %d: %s", m[1], m[2], nproc, dl.Text)
	}
	p.until("a decision on every rank", 2*slack, func() bool { return len(decidedRanks(p)) == nproc })
	checkFourRanks(t, p)

	// When rank 2 finished its last good step.
	var lastGood time.Time
	for _, l := range p.matching(torchStepRe) {
		m := torchStepRe.FindStringSubmatch(l.Text)
		if m[1] == "2" && m[2] == strconv.Itoa(torchFaultAt-1) {
			lastGood = l.At
		}
	}
	if lastGood.IsZero() {
		t.Fatalf("rank 2 never finished step %d\n%s", torchFaultAt-1, tail(p.output(), 60))
	}
	for _, h := range hangLines(p) {
		past := h.ageSeconds - torchTimeout.Seconds()
		wall := h.at.Sub(lastGood) - torchTimeout
		t.Logf("rank %d: %s, age %.2fs, logged %.2fs after rank 2's last good step", h.rank, h.kind, h.ageSeconds, h.at.Sub(lastGood).Seconds())
		if past < 0 || wall > slack+time.Second {
			t.Errorf("rank %d decided at age %.2fs, %v after the fault: want within the %v timeout plus %v", h.rank, h.ageSeconds, wall+torchTimeout, torchTimeout, slack)
		}
		if h.rank == 2 && fault == "busy" && h.kind != "host" {
			t.Errorf("the spinning rank 2 decided %s, want host", h.kind)
		}
		if h.rank != 2 && h.kind != "stalled" {
			t.Errorf("waiting rank %d decided %s, want stalled", h.rank, h.kind)
		}
	}

	names, _ := filepath.Glob(filepath.Join(dir, "*"+dumpfile.Ext))
	if len(names) != nproc {
		t.Errorf("dump files %v, want one per rank", names)
	}
	for r := range nproc {
		f, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(r, nproc)))
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if len(f.Helpers) != 2 {
			t.Errorf("rank %d (pid %d): %d helpers in its dump, want its 2 DataLoader workers", r, f.PID, len(f.Helpers))
		}
		py := 0
		for _, th := range f.Threads {
			if th.TID == f.PID {
				py = len(th.Python)
			}
		}
		if py == 0 {
			t.Errorf("rank %d: no Python frames of the main thread; errors %v", r, f.Errors)
		}
	}
	summary := runViewer(t, dir)
	if !strings.Contains(summary, "Likely culprit: rank 2\n") {
		t.Errorf("the viewer does not name rank 2:\n%s", summary)
	}
	code := p.end(60 * time.Second)
	t.Logf("job ended with status %d", code)
	if t.Failed() {
		t.Logf("launcher output:\n%s", tail(p.output(), 80))
	}
}

// TestTorchrunRestart: torchrun restarts the job once (--max_restarts 1)
// after rank 2 exits with an error at step 5; in the second incarnation
// rank 2 sleeps at step 5. The hang of the second incarnation is decided,
// its four ranks (new processes) are dumped with incarnation 1, the
// exited ranks of the first are no rank any more, and the viewer merges
// the second incarnation and names rank 2.
func TestTorchrunRestart(t *testing.T) {
	privileged.Root(t)
	requireTorch(t)
	dir := t.TempDir()
	once := filepath.Join(t.TempDir(), "faulted-once")
	root, err := filepath.Abs("../../../testdata/torchjob/job.py")
	if err != nil {
		t.Fatal(err)
	}
	args := []string{bins.launch, "--hang-timeout", torchTimeout.String(), "--timeline-path", dir, "--port", "0",
		torchPython, "-m", "torch.distributed.run", "--nproc_per_node", strconv.Itoa(nproc), "--redirects", "1", "--tee", "1",
		"--max_restarts", "1", "--master_port", strconv.Itoa(freePort(t)), root, "--workers", "2", "--steps", "100000",
		"--fault", "exit", "--fault-once", once, "--fault-then", "sleep", "--fault-rank", "2", "--fault-step", strconv.Itoa(torchFaultAt)}
	p := start(t, args)
	dl := p.waitRe(dumpedRe, 5*time.Minute)
	if m := dumpedRe.FindStringSubmatch(dl.Text); m[1] != strconv.Itoa(nproc) || m[2] != strconv.Itoa(nproc) {
		t.Fatalf("dumped %s ranks of %s, want all %d: %s", m[1], m[2], nproc, dl.Text)
	}
	announced := map[string]bool{}
	for _, l := range p.matching(rankLineRe) {
		announced[rankLineRe.FindStringSubmatch(l.Text)[1]] = true
	}
	if len(announced) != 2*nproc {
		t.Errorf("%d rank processes announced, want %d (two incarnations of %d)", len(announced), 2*nproc, nproc)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*"+dumpfile.Ext))
	if len(names) != nproc {
		t.Errorf("dump files %v, want one per rank", names)
	}
	for r := range nproc {
		f, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(r, nproc)))
		if err != nil {
			t.Fatal(err)
		}
		if f.Incarnation != 1 || f.Job == "" {
			t.Errorf("rank %d's dump: job %q incarnation %d, want the second incarnation (1)", r, f.Job, f.Incarnation)
		}
	}
	summary := runViewer(t, dir)
	if !strings.Contains(summary, "Likely culprit: rank 2\n") {
		t.Errorf("the viewer does not name rank 2:\n%s", summary)
	}
	if t.Failed() {
		t.Logf("launcher output:\n%s", tail(p.output(), 80))
	}
	p.end(60 * time.Second)
}

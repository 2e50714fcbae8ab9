package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
)

// checkWorkers checks a job whose ranks fork data loader workers (they
// inherit RANK and the mapped GPU libraries): exactly one process is
// announced per rank, one dump file and one series per rank, each rank's
// dump holds its workers with their threads, and with the
// dataloader-worker fault the faulty rank's blocked worker shows the read
// it is stuck in, native and Python, and the viewer's summary names it.
func checkWorkers(t *testing.T, url string, p *proc, dir, summary string, c faultCase) {
	t.Helper()
	checkFourRanks(t, p)
	names, _ := filepath.Glob(filepath.Join(dir, "*"+dumpfile.Ext))
	if len(names) != nproc {
		t.Errorf("dump files %v, want one per rank", names)
	}
	s := parseText(mustScrape(t, url))
	var series []string
	for _, x := range s {
		if x.name == "XPU_TIMER_COMMON_HANG" {
			series = append(series, x.labels["rank"])
		}
	}
	slices.Sort(series)
	if want := []string{"0", "1", "2", "3"}; !slices.Equal(series, want) {
		t.Errorf("XPU_TIMER_COMMON_HANG series for ranks %v, want one for each of %v", series, want)
	}
	rankPIDs := map[int]bool{}
	files := make([]*dumpfile.File, nproc)
	for r := range nproc {
		f, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(r, nproc)))
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		files[r] = f
		rankPIDs[f.PID] = true
	}
	for r, f := range files {
		if len(f.Helpers) != c.workers {
			t.Errorf("rank %d (pid %d): %d helpers in its dump, want its %d workers", r, f.PID, len(f.Helpers), c.workers)
		}
		for _, h := range f.Helpers {
			if rankPIDs[h.PID] || len(h.Threads) == 0 {
				t.Errorf("rank %d: helper %d (a rank's pid: %v) with %d threads, errors %v", r, h.PID, rankPIDs[h.PID], len(h.Threads), h.Errors)
			}
		}
	}
	if c.fault != testbed.FaultDataloaderWorker {
		return
	}
	// The worker that makes the faulty step's batch is blocked in
	// BlockingSource.read: os.read of a pipe, the read system call.
	var blocked []int
	for _, h := range files[c.rank].Helpers {
		for _, th := range h.Threads {
			if inPython(th.Python, "read", "run.py") && inPython(th.Python, "worker_main", "run.py") && inNative(th.Native, readCall) {
				blocked = append(blocked, h.PID)
			}
		}
	}
	if len(blocked) != 1 {
		for _, h := range files[c.rank].Helpers {
			for _, th := range h.Threads {
				t.Logf("helper %d thread %d %q: python %s; native %s", h.PID, th.TID, th.Name, frameNames(th.Python), frameNames(th.Native))
			}
		}
		t.Errorf("faulty rank %d: helpers %v blocked in BlockingSource.read's read, want exactly one", c.rank, blocked)
	}
	// The viewer lines the workers up across ranks and names the one that
	// differs; no worker is a thread the other ranks "lack".
	re := regexp.MustCompile(`rank (\d+)'s thread "helper (\d+): pt_data_worker" is in `)
	var named []string
	for _, m := range re.FindAllStringSubmatch(summary, -1) {
		named = append(named, m[1]+"/"+m[2])
	}
	if len(blocked) == 1 && !slices.Equal(named, []string{fmt.Sprintf("%d/%d", c.rank, blocked[0])}) {
		t.Errorf("summary.txt names the workers (rank/pid) %v, want rank %d's blocked worker %d only", named, c.rank, blocked[0])
	}
	if lack := regexp.MustCompile(`has a thread "helper \d+: pt_data_worker" in .* lack`); lack.MatchString(summary) {
		t.Errorf("summary.txt reports a worker as a thread other ranks lack: %s", lack.FindString(summary))
	}
}

// readCall is the C library's read as the symbol tables name it.
var readCall = regexp.MustCompile(`^(__GI___libc_read|__libc_read|__read|read)(@.*)?$`)

// inPython says whether a Python stack has a frame of function fn in a
// file ending with file.
func inPython(frames []stack.Frame, fn, file string) bool {
	return slices.ContainsFunc(frames, func(f stack.Frame) bool {
		return (f.Func == fn || strings.HasSuffix(f.Func, "."+fn)) && strings.HasSuffix(f.File, file)
	})
}

// inNative says whether a native stack has a frame whose function matches re.
func inNative(frames []stack.Frame, re *regexp.Regexp) bool {
	return slices.ContainsFunc(frames, func(f stack.Frame) bool { return re.MatchString(f.Func) })
}

// frameNames lists the functions of frames, innermost first.
func frameNames(frames []stack.Frame) string {
	var out []string
	for _, f := range frames {
		n := f.Func
		if f.Line > 0 {
			n += ":" + strconv.Itoa(f.Line)
		}
		out = append(out, n)
	}
	return strings.Join(out, " < ")
}

package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
)

var mpiRankRe = regexp.MustCompile(`level=INFO msg=rank .*\bpid=(\d+) rank=(\d+) .*from=openmpi`)

// TestOpenMPI launches the testbed's ranks with Debian's real mpirun: no
// RANK in their environment, only Open MPI's variables. The ranks are
// identified from those (never by order of appearance), the hang is
// decided, every file is named with the rank's real number, and the viewer
// names the faulty rank.
func TestOpenMPI(t *testing.T) {
	privileged.Root(t)
	b := testbed.Build(t)
	dir := t.TempDir()
	const faulty = 2
	o := testbed.JobOptions{NProc: nproc, Steps: 60, Fault: testbed.FaultSkipCollective, FaultRank: faulty, FaultStep: faultStep}
	rankArgs := b.JobCommand(o).Args // python3 run.py --nproc 4 ...
	args := append([]string{bins.launch, "--hang-timeout", timeout.String(), "--timeline-path", dir, "--port", "0",
		"mpirun", "--allow-run-as-root", "--oversubscribe", "-np", strconv.Itoa(nproc),
		"-x", "XPU_FAKEGPU_ROLE=rank", "-x", "XPU_FAKEGPU_STORE", "-x", "PATH"}, rankArgs...)
	p := start(t, args)
	p.waitRe(dumpedRe, 60*time.Second)
	p.until("a decision on every rank", 2*slack, func() bool { return len(decidedRanks(p)) == nproc })

	started := p.rankPIDs() // rank -> pid, as each rank printed it
	announced := map[int]int{}
	for _, l := range p.matching(mpiRankRe) {
		m := mpiRankRe.FindStringSubmatch(l.Text)
		pid, _ := strconv.Atoi(m[1])
		r, _ := strconv.Atoi(m[2])
		announced[r] = pid
	}
	if len(announced) != nproc {
		t.Fatalf("ranks identified from Open MPI: %v, want all %d\n%s", announced, nproc, tail(p.output(), 40))
	}
	for r := range nproc {
		if announced[r] != started[r] {
			t.Errorf("rank %d: announced pid %d, the rank itself says pid %d; the log of both:\n%s", r, announced[r], started[r],
				linesWith(p.output(), fmt.Sprintf("pid=%d ", announced[r]), fmt.Sprintf("pid=%d ", started[r])))
		}
		f, err := dumpfile.Read(filepath.Join(dir, dumpfile.Name(r, nproc)))
		if err != nil {
			t.Fatal(err)
		}
		if f.PID != started[r] || f.Rank != r || f.WorldSize != nproc {
			t.Errorf("%s holds pid %d rank %d of %d, want pid %d", dumpfile.Name(r, nproc), f.PID, f.Rank, f.WorldSize, started[r])
		}
	}
	if strings.Contains(p.output(), "numbering it by order of appearance") {
		t.Error("a rank was numbered by order of appearance")
	}
	summary := runViewer(t, dir)
	if !strings.Contains(summary, "Likely culprit: rank 2\n") {
		t.Errorf("the viewer does not name rank %d:\n%s", faulty, summary)
	}
	// SIGTERM to the launcher ends mpirun, which ends its ranks: none is
	// left behind in its own process group.
	p.end(30 * time.Second)
}

// linesWith returns the lines of out that hold any of subs.
func linesWith(out string, subs ...string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		for _, s := range subs {
			if strings.Contains(l, s) {
				b.WriteString(l + "\n")
				break
			}
		}
	}
	return b.String()
}

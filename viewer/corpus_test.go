package viewer

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/viewer/culprit"
)

// The corpus holds real dumps: testdata/torchjob/job.py on Debian's
// python3-torch 1.13 (CPython 3.11, gloo, 4 ranks, 2 DataLoader workers a
// rank), rank 2 faulty at step 5, each rank captured by
// testdata/torchjob/capture.sh as the agent writes it. "killed" is
// job.py's vanish fault: rank 2 died while its connections stayed open, so
// the others hang and it left no dump.
var corpus = []struct {
	fault string
	stall string // what the report must say of rank 2's driving thread
}{
	{"sleep", "main thread is in stall_in_python_sleep (job.py:153), waiting in __GI___clock_nanosleep (libc.so.6)"},
	{"deadlock", "main thread is in deadlock_two_locks (job.py:176), waiting in"},
	{"busy", "main thread is in spin_forever (job.py:159), running"},
	{"dataloader", "main thread is in select (selectors.py:415) from train (job.py:279), waiting in __GI___poll (libc.so.6)"},
	{"killed", "rank 2 left no dump"},
}

// TestCorpus checks that the report names the faulty rank, and only it, in
// every real hang, with the Python frame and wait site it stalled in.
func TestCorpus(t *testing.T) {
	for _, c := range corpus {
		t.Run(c.fault, func(t *testing.T) {
			res, err := Run(Options{Dir: filepath.Join("testdata", "torchjob", c.fault), Out: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Report.Culprits, []int{2}) || !strings.Contains(res.Summary, "Likely culprit: rank 2\n") {
				t.Errorf("culprits %v, want [2]\n%s", res.Report.Culprits, res.Summary)
			}
			if !strings.Contains(res.Summary, c.stall) {
				t.Errorf("summary lacks %q:\n%s", c.stall, res.Summary)
			}
			if len(res.Skipped) != 0 || res.World != 4 {
				t.Errorf("world %d, skipped %v", res.World, res.Skipped)
			}
			// Helpers (gloo, the c10d store, queue feeders) never name a rank.
			for _, f := range res.Report.Findings {
				if f.Kind == culprit.KindBackground && strings.Contains(res.Report.Why, f.Text) {
					t.Errorf("a background finding became the reason: %s", f.Text)
				}
			}
		})
	}
}

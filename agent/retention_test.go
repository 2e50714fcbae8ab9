package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/dumpfile"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
	"github.com/xpu-timer/xpu-timer/timeline"
)

// Through the agent: retention keeps Count earlier incarnations per job
// and the live rank's own, however old; a dump round asks for a run.
func TestRetentionThroughAgent(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	for inc := range 4 {
		name := filepath.Join(timeline.IncarnationsDir, timeline.IncarnationName("10.0.0.1:29500", inc), dumpfile.Name(0, 1))
		testutil.Tree(t, dir, map[string]string{name: "old"}, old.Add(time.Duration(inc)*time.Minute))
	}
	b := newBed(t, "node-a", dir, map[int]map[string]string{100: env(0, 1)}, func(o *Options) { o.Retain = timeline.Retention{Count: 2} })
	work(b.Agent, 100, sec, false) // rank 0 of 1, incarnation 0 of job 10.0.0.1:29500: alive
	b.retainOnce(context.Background())
	left, _ := os.ReadDir(filepath.Join(dir, timeline.IncarnationsDir))
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"10.0.0.1_29500.0", "10.0.0.1_29500.2", "10.0.0.1_29500.3"}) {
		t.Fatalf("left %v", names)
	}
	if len(b.retainCh) != 0 {
		t.Fatal("retention asked for before any dump")
	}
	b.at(4 * sec)
	b.Tick(context.Background())
	if b.capture.count(100) != 1 || len(b.retainCh) != 1 {
		t.Fatalf("dumps %d, retention requests %d; want 1 and 1", b.capture.count(100), len(b.retainCh))
	}
}

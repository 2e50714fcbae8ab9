package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
	"github.com/xpu-timer/xpu-timer/timeline"
)

// earlierIncarnations makes a timeline path holding n earlier
// incarnations of job 10.0.0.1:29500, each with rank 0 of 1, an hour old,
// a minute apart.
func earlierIncarnations(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	for inc := range n {
		name := filepath.Join(timeline.IncarnationsDir, timeline.IncarnationName("10.0.0.1:29500", inc), dumpfile.Name(0, 1))
		testutil.Tree(t, dir, map[string]string{name: "old"}, old.Add(time.Duration(inc)*time.Minute))
	}
	return dir
}

// Through the agent: retention keeps Count earlier incarnations per job
// and the live rank's own, however old; a dump round asks for a run.
func TestRetentionThroughAgent(t *testing.T) {
	dir := earlierIncarnations(t, 4)
	b := newBed(t, "node-a", dir, map[int]map[string]string{100: env(0, 1)}, func(o *Options) { o.Retain = timeline.Retention{Count: 2} })
	work(b.Agent, 100, sec, false) // rank 0 of 1, incarnation 0 of job 10.0.0.1:29500: alive
	b.looked()
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

// An agent that never dumps (watch: no Capturer) leaves the timeline path
// alone, whatever its retention settings say (TestRetentionThroughAgent
// has one that dumps apply them).
func TestNoRetentionWithoutDumps(t *testing.T) {
	dir := earlierIncarnations(t, 3)
	b := newBed(t, "node-a", dir, nil, func(o *Options) { o.Retain, o.Capturer = timeline.Retention{Count: 1}, nil })
	// The loop returns at once; were it to run, it would prune at start
	// and then wait out ctx.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b.retainLoop(ctx)
	left, err := os.ReadDir(filepath.Join(dir, timeline.IncarnationsDir))
	if err != nil || len(left) != 3 {
		t.Fatalf("%d incarnations left (%v), want all 3", len(left), err)
	}
}

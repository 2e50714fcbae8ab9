package agent

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/dumpfile"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
	"github.com/xpu-timer/xpu-timer/timeline"
)

// The settings' stall watch gives the loop a ProcLooker unless the command
// chose a Looker; off, the loop looks at nothing.
func TestSettingsStallWatch(t *testing.T) {
	lk := &fakeLooker{}
	for _, tc := range []struct {
		name string
		o    Options
		want Looker
	}{
		{"off", Options{}, nil},
		{"on", Options{Settings: Settings{StallWatch: true}}, &ProcLooker{}},
		{"chosen", Options{Settings: Settings{StallWatch: true}, Looker: lk}, lk},
		{"chosen while off", Options{Looker: lk}, lk},
	} {
		tc.o.Tracer = &fakeTracer{}
		got := New(tc.o).o.Looker
		switch want := tc.want.(type) {
		case nil:
			if got != nil {
				t.Errorf("%s: looker %T, want none", tc.name, got)
			}
		case *ProcLooker:
			if _, ok := got.(*ProcLooker); !ok {
				t.Errorf("%s: looker %T, want *ProcLooker", tc.name, got)
			}
		default:
			if got != want {
				t.Errorf("%s: looker %T %p, want the chosen one", tc.name, got, got)
			}
		}
	}
}

// An agent that never dumps (watch: no Capturer) leaves the timeline path
// alone, whatever its retention settings say (TestRetentionThroughAgent
// has one that dumps apply them).
func TestNoRetentionWithoutDumps(t *testing.T) {
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	for inc := range 3 {
		name := filepath.Join(timeline.IncarnationsDir, timeline.IncarnationName("10.0.0.1:29500", inc), dumpfile.Name(0, 1))
		testutil.Tree(t, dir, map[string]string{name: "old"}, old.Add(time.Duration(inc)*time.Minute))
	}
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

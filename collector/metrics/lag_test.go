package metrics

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestLagFamilies(t *testing.T) {
	long := strings.Repeat("x", 200)
	r := Rank{Rank: 3, LocalRank: 1, PID: 7,
		Comms: []Comm{
			{ID: "9c1e04a1b2c3d4e5f60718293a4b5c6d", Issued: 12, Completed: 11, WaitSeconds: 0},
			{ID: "9c1e04a1b2c3ffffffffffffffffffff", Issued: 1}, // the same short id: served once
			{ID: "local:7f00", Issued: 5, Completed: 5, WaitSeconds: 2.5},
		},
		Lags: []Lag{
			{Comm: "9c1e04a1b2c3d4e5f60718293a4b5c6d", Activity: "python", Lagging: true},
			{Comm: "0123456789abcdef0123456789abcdef", Activity: "checkpoint"},
		},
		Activity: &Activity{Kind: "python", Detail: long},
	}
	// More communicators than MaxComms: the first MaxComms are served.
	for i := range MaxComms + 4 {
		r.Comms = append(r.Comms, Comm{ID: fmt.Sprintf("%012x", i), Issued: uint64(i)})
	}
	many := r
	for i := range MaxComms + 4 {
		many.Lags = append(many.Lags, Lag{Comm: fmt.Sprintf("%012x", i), Activity: "python"})
	}
	if n := testutil.CollectAndCount(newTestExporter(Snapshot{Ranks: []Rank{many}}).c, "xpu_timer_rank_lagging"); n != MaxComms {
		t.Errorf("lagging series of a rank with %d: %d, want %d", len(many.Lags), n, MaxComms)
	}
	x := newTestExporter(Snapshot{Ranks: []Rank{r}})
	want := `
# HELP xpu_timer_rank_activity 1 while the rank has issued no collective for about XPU_TIMER_LAG_WARN: what it is doing (checkpoint, dataloader, compile, gc, gpu-wait, collective, python, unknown), from one stack sample; detail names the frame, wait or collective.
# TYPE xpu_timer_rank_activity gauge
xpu_timer_rank_activity{activity="python",detail="` + long[:maxDetail] + `",ip="10.0.0.7",job_name="llama",local_rank="1",pod_name="llama-worker-1",rank="3"} 1
# HELP xpu_timer_rank_lagging 1 while peers of the rank on this node have waited XPU_TIMER_LAG_WARN or more in a collective of the communicator that the rank has not issued, 0 once it caught up; activity is what it was doing.
# TYPE xpu_timer_rank_lagging gauge
xpu_timer_rank_lagging{activity="checkpoint",comm="0123456789ab",ip="10.0.0.7",job_name="llama",local_rank="1",pod_name="llama-worker-1",rank="3"} 0
xpu_timer_rank_lagging{activity="python",comm="9c1e04a1b2c3",ip="10.0.0.7",job_name="llama",local_rank="1",pod_name="llama-worker-1",rank="3"} 1
`
	if err := testutil.GatherAndCompare(x.Gatherer(), strings.NewReader(want), "xpu_timer_rank_activity", "xpu_timer_rank_lagging"); err != nil {
		t.Error(err)
	}
	wantWait := `
# HELP xpu_timer_collective_wait_seconds How long a thread of the rank has waited in a collective of the communicator (the one after the last completed), 0 when none waits.
# TYPE xpu_timer_collective_wait_seconds gauge
xpu_timer_collective_wait_seconds{comm="9c1e04a1b2c3",ip="10.0.0.7",job_name="llama",local_rank="1",pod_name="llama-worker-1",rank="3"} 0
xpu_timer_collective_wait_seconds{comm="local:7f00",ip="10.0.0.7",job_name="llama",local_rank="1",pod_name="llama-worker-1",rank="3"} 2.5
`
	for i := range MaxComms - 2 {
		wantWait += fmt.Sprintf(`xpu_timer_collective_wait_seconds{comm="%012x",ip="10.0.0.7",job_name="llama",local_rank="1",pod_name="llama-worker-1",rank="3"} 0`+"\n", i)
	}
	if err := testutil.GatherAndCompare(x.Gatherer(), strings.NewReader(wantWait), "xpu_timer_collective_wait_seconds"); err != nil {
		t.Error(err)
	}
	for _, f := range []string{"xpu_timer_collective_issued", "xpu_timer_collective_completed"} {
		if n := testutil.CollectAndCount(x.c, f); n != MaxComms {
			t.Errorf("%s: %d series, want %d", f, n, MaxComms)
		}
	}
	// A rank that issues collectives has no activity series.
	r.Activity = nil
	if n := testutil.CollectAndCount(newTestExporter(Snapshot{Ranks: []Rank{r}}).c, "xpu_timer_rank_activity"); n != 0 {
		t.Errorf("activity series of a rank that issues: %d", n)
	}
}

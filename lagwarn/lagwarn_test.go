package lagwarn

import (
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/timer"
)

const sec = int64(time.Second)

// The communicators a rank's metrics carry: known by their id, the most
// recently active first, at most metrics.MaxComms, without one the rank
// stopped using while it used another since.
func TestCommSeries(t *testing.T) {
	const min = int64(time.Minute)
	now := 60 * min
	ps := []timer.CommProgress{
		{CommState: timer.CommState{ID: "aa", Issued: 3}, Active: now - 11*min}, // idle while bb is used: dropped
		{CommState: timer.CommState{ID: "bb", Issued: 9, Completed: 8}, Active: now - sec, Waiting: 9, WaitSince: now - 2*sec},
		{CommState: timer.CommState{ID: "local:7f", Issued: 1}, Active: now},                                         // not comparable: dropped
		{CommState: timer.CommState{ID: "cc", Issued: 2}, Active: now - 12*min, Waiting: 3, WaitSince: now - 12*min}, // waited in: kept
	}
	got := CommSeries(ps, now)
	want := []metrics.Comm{{ID: "bb", Issued: 9, Completed: 8, WaitSeconds: 2}, {ID: "cc", Issued: 2, WaitSeconds: 720}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("CommSeries = %+v, want %+v", got, want)
	}
	// A rank idle on all of them keeps them all.
	for i := range ps {
		ps[i].Active = now - 20*min
	}
	if got := CommSeries(ps, now); len(got) != 3 {
		t.Errorf("CommSeries of an idle rank = %+v, want its three communicators", got)
	}
	var many []timer.CommProgress
	for i := range metrics.MaxComms + 3 {
		many = append(many, timer.CommProgress{CommState: timer.CommState{ID: string(rune('a' + i))}, Active: int64(i)})
	}
	if got := CommSeries(many, now); len(got) != metrics.MaxComms || got[0].ID != string(rune('a'+metrics.MaxComms+2)) {
		t.Errorf("CommSeries of %d = %d, first %q", len(many), len(got), got[0].ID)
	}
}

package agent

import (
	"context"
	"path/filepath"
	"time"

	"github.com/xpu-timer/xpu-timer/timeline"
)

// Retention runs (timeline.Retain) besides the dumps.
const (
	RetainInterval = 10 * time.Minute // how often retention runs besides after dumps
	retainBudget   = 10 * time.Second // the longest one retention run may take
)

// retainLoop runs retention at start, after each dump round (retainSoon)
// and every RetainInterval, one run at a time, each within retainBudget,
// until ctx is done. An agent that never dumps (no Capturer: watch) leaves
// the timeline path alone.
func (a *Agent) retainLoop(ctx context.Context) {
	if a.o.Retain.Zero() || a.o.Capturer == nil {
		return
	}
	t := time.NewTicker(RetainInterval)
	defer t.Stop()
	for {
		a.retainOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.retainCh:
		}
	}
}

// retainSoon asks the retention loop for a run (after a dump round moved
// an earlier incarnation aside); it never blocks.
func (a *Agent) retainSoon() {
	select {
	case a.retainCh <- struct{}{}:
	default:
	}
}

// retainOnce runs retention once, sparing the incarnations of the live ranks.
func (a *Agent) retainOnce(ctx context.Context) {
	keep := map[string]bool{}
	for _, p := range a.book.Ranks() {
		keep[timeline.IncarnationName(p.ID.Job, max(p.ID.Incarnation, 0))] = true
	}
	ctx, cancel := context.WithTimeout(ctx, retainBudget)
	defer cancel()
	res := timeline.Retain(ctx, a.o.TimelinePath, a.o.Retain, keep, a.o.Now())
	if len(res.Removed) > 0 {
		a.log.Info("retention removed earlier incarnations' dumps", "incarnations", res.Removed, "files", res.Files, "bytes", res.Bytes,
			"path", filepath.Join(a.o.TimelinePath, timeline.IncarnationsDir))
	}
	for _, err := range res.Errs {
		a.log.Warn("retention", "path", a.o.TimelinePath, "err", err)
	}
}

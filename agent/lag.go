package agent

import (
	"github.com/xpu-timer/xpu-timer/collector/capture/activity"
	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/lagwarn"
)

// newLagWatch sets up the early warning (package lagwarn) with the
// agent's settings and its stack sampler: LagSampler, else the dumps'
// Capturer; neither: activities are unknown.
func (a *Agent) newLagWatch() *lagwarn.Watch {
	cfg := lagwarn.Config{Warn: a.o.LagWarn, Interval: a.o.Interval, Parallel: a.o.Parallel}
	c := a.o.LagSampler
	if c == nil {
		c = a.o.Capturer
	}
	if c != nil {
		cfg.Sample = func(pid int, f activity.Facts) activity.Activity {
			a.engine.Stopped(pid) // the stall watch's looks allow its stop
			p, err := c.Capture(pid)
			if err != nil {
				a.log.Debug("activity sample failed", "pid", pid, "err", err)
				return activity.Activity{Kind: activity.Unknown}
			}
			return activity.Classify(pid, p.Threads, f)
		}
	}
	return lagwarn.New(cfg)
}

// watchLags runs the early warning's check at monotonic time now, and
// logs and reports what it found.
func (a *Agent) watchLags(now int64) {
	res := a.lag.Check(a.engine, a.book.Live(), now)
	for _, n := range res.Idle {
		id, _ := a.identity(n.PID)
		a.log.Info("idle", "pid", n.PID, "rank", id.Rank, "activity", n.Activity.Kind, "detail", n.Activity.Detail, "since", n.Since.Seconds())
	}
	for _, w := range res.Warnings {
		a.warnLag(w)
	}
	for _, c := range res.CaughtUp {
		id, _ := a.identity(c.PID)
		a.log.Info("caught up", "pid", c.PID, "rank", id.Rank, "comm", metrics.ShortComm(c.Comm), "seq", c.Seq, "after", c.After.Seconds())
		r := Report{Event: EventCaughtUp, PID: c.PID, Comm: c.Comm, Seq: c.Seq}
		r.setRank(id)
		a.report(r)
	}
}

// warnLag logs and reports a new warning.
func (a *Agent) warnLag(w lagwarn.Warning) {
	id, known := a.identity(w.PID)
	rank := w.Rank
	if known {
		rank = id.Rank
	}
	a.log.Warn("lagging", "pid", w.PID, "rank", rank, "comm", metrics.ShortComm(w.Comm), "seq", w.Seq, "issued", w.Issued,
		"op", w.Op, "activity", w.Activity.Kind, "detail", w.Activity.Detail, "since", w.Waited.Seconds(), "waiting_rank", w.PeerRank, "waiting", w.Peers)
	l := w.Laggard
	r := Report{Event: EventLagging, PID: w.PID, Comm: w.Comm, Seq: w.Seq, Op: w.Op, AgeSeconds: w.Waited.Seconds(),
		Laggard: &l, Activity: string(w.Activity.Kind), Detail: w.Activity.Detail}
	if known {
		r.setRank(id)
	} else if rank >= 0 {
		r.Rank = &rank
	}
	a.report(r)
}

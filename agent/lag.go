package agent

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/activity"
	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/timer"
)

// The early warning (XPU_TIMER_LAG_WARN): before any hang is decided,
// the loop names the rank its peers wait for, says what it is doing,
// and exports where every rank stands on its communicators, so that the
// alert rules can compare ranks of every node.
//
// Each check:
//   - a rank whose peers on this node have waited LagWarn in a
//     collective it has not issued (timer's Laggards) is warned of once
//     per episode: a log line msg=lagging, a Report, the gauge
//     xpu_timer_rank_lagging 1 (0 once it caught up), with its activity
//     from one stack sample of it alone;
//   - a rank with communicators that has issued no collective for about
//     LagWarn (one check interval less, so that its activity is out when
//     the warning of its peers' nodes is due) is sampled once per such
//     episode and its activity served (xpu_timer_rank_activity) until it
//     issues one again: on another node, its peers' warning joins it.
//     One whose main thread the probes see waiting in a collective is
//     not stopped: that collective is its activity.
//
// The loop checks just as a wait reaches the warning's, or a rank's
// silence its sampling point, rather than at the next interval.
//
// A sample is the dumps' capture of that rank alone: its threads stopped
// once for at most a few milliseconds (twice when a thread could not be
// stopped in time), never a dump (no file, no marker, no other rank),
// and it sets no hang family. One sample serves both while the rank
// issues nothing new.

// CommIdle is how long a communicator a rank stopped using, while it
// used another since, stays in the metrics.
const CommIdle = 10 * time.Minute

// lagWatch is the early warning's state.
type lagWatch struct {
	mu      sync.Mutex
	samples map[int]rankActivity // by pid: the latest sample and what the rank had issued then
	lags    map[lagKey]*lagEpisode
	next    int64 // when the next check is due that may warn or sample, if before the next interval's (0: none)
}

// due is when the early warning wants a check (0: at the next interval).
func (w *lagWatch) due() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.next
}

// rankActivity is what one sample of a rank said.
type rankActivity struct {
	active int64 // the rank's latest collective (or communicator's creation) when sampled
	act    activity.Activity
	stack  bool // from a stack sample (or none can be taken), not the probes alone: final until the rank issues
}

type lagKey struct {
	pid  int
	comm string
}

// lagEpisode is one warning: from a rank's first check behind to the
// one it caught up at.
type lagEpisode struct {
	timer.Laggard
	act     activity.Activity
	lagging bool
}

func newLagWatch() *lagWatch {
	return &lagWatch{samples: map[int]rankActivity{}, lags: map[lagKey]*lagEpisode{}}
}

// lagSampler takes the stack sample of a rank: LagSampler, else the
// dumps' Capturer; nil when neither is set.
func (a *Agent) lagSampler() Capturer {
	if a.o.LagSampler != nil {
		return a.o.LagSampler
	}
	return a.o.Capturer
}

// lastCollective is when a rank last issued a collective on a
// communicator known by its id, or created the newest such communicator;
// false when it has none.
func lastCollective(ps []timer.CommProgress) (int64, bool) {
	var last int64
	ok := false
	for _, p := range ps {
		if !local(p.ID) {
			last, ok = max(last, p.Active), true
		}
	}
	return last, ok
}

// local says whether a communicator is known only by its handle: its id
// is not the same on every rank.
func local(id string) bool { return strings.HasPrefix(id, "local:") }

// idleAfter is how long a rank issues no collective before it is
// sampled and its activity served: one check interval short of the
// warning's wait (its peers' nodes warn once they waited that long), and
// at least half of it.
func (a *Agent) idleAfter() int64 {
	return int64(max(a.o.LagWarn-a.o.Interval, a.o.LagWarn/2))
}

// activityNeed is a rank whose activity is wanted at a check.
type activityNeed struct {
	pid    int
	active int64          // its latest collective
	facts  activity.Facts // what the probes know it waits on
	stack  bool           // a stack sample is wanted even when the probes know it waits in a collective (a new warning)
}

// watchLags runs the early warning's check at monotonic time now.
func (a *Agent) watchLags(now int64) {
	warn := a.o.LagWarn
	if warn <= 0 {
		return
	}
	live := a.book.Live()
	laggards := a.engine.Laggards(now, warn)
	w := a.lag
	w.mu.Lock()
	fresh := map[int]bool{} // pids with a new warning
	for _, l := range laggards {
		if e := w.lags[lagKey{l.PID, l.Comm}]; e == nil || !e.lagging {
			fresh[l.PID] = true
		}
	}
	w.mu.Unlock()
	var needs []activityNeed
	var next int64 // the next check a wait or an idle rank will want
	soon := func(at int64) {
		if at > now && at < now+int64(a.o.Interval) && (next == 0 || at < next) {
			next = at
		}
	}
	for _, pid := range live {
		ps := a.engine.Progress(pid, now)
		for _, p := range ps {
			if p.Waiting > 0 {
				soon(p.WaitSince + int64(warn)) // a peer of it may be warned of then
			}
		}
		active, ok := lastCollective(ps)
		if ok {
			soon(active + a.idleAfter())
		}
		if !ok || now-active < a.idleAfter() && !fresh[pid] {
			continue
		}
		n := activityNeed{pid: pid, active: active, stack: fresh[pid]}
		if aw, ok := a.engine.Awaiting(pid, now); ok {
			n.facts = facts(aw)
		}
		w.mu.Lock()
		s, have := w.samples[pid]
		w.mu.Unlock()
		if have && s.active == active && (s.stack || !n.stack && inCollective(n)) {
			// Known since its last collective: by a sample, or by the
			// probes while it still waits in that collective.
			continue
		}
		needs = append(needs, n)
	}
	acts := a.activities(needs)

	w.mu.Lock()
	defer w.mu.Unlock()
	w.next = next
	for i, n := range needs {
		w.samples[n.pid] = acts[i]
		if !fresh[n.pid] {
			id, _ := a.identity(n.pid)
			a.log.Info("idle", "pid", n.pid, "rank", id.Rank, "activity", acts[i].act.Kind, "detail", acts[i].act.Detail,
				"since", time.Duration(now-n.active).Seconds())
		}
	}
	// New warnings, then those that ended.
	behind := map[lagKey]bool{}
	for _, l := range laggards {
		k := lagKey{l.PID, l.Comm}
		behind[k] = true
		if e := w.lags[k]; e != nil && e.lagging {
			e.Laggard = l
			continue
		}
		act := w.samples[l.PID].act
		if act.Kind == "" {
			act.Kind = activity.Unknown // not a live rank: never sampled
		}
		e := &lagEpisode{Laggard: l, act: act, lagging: true}
		w.lags[k] = e
		a.warnLag(e, now)
	}
	for k, e := range w.lags {
		if !slices.Contains(live, k.pid) {
			delete(w.lags, k)
			continue
		}
		if e.lagging && !behind[k] {
			e.lagging = false
			id, _ := a.identity(k.pid)
			a.log.Info("caught up", "pid", k.pid, "rank", id.Rank, "comm", metrics.ShortComm(k.comm), "seq", e.Seq,
				"after", time.Duration(now-e.Since).Seconds())
			r := Report{Event: EventCaughtUp, PID: k.pid, Comm: k.comm, Seq: e.Seq}
			r.setRank(id)
			a.report(r)
		}
	}
	for pid := range w.samples {
		if !slices.Contains(live, pid) {
			delete(w.samples, pid)
		}
	}
}

// inCollective says whether the probes see the main thread of a rank
// wait in a collective.
func inCollective(n activityNeed) bool { return n.facts.TID == n.pid && n.facts.Collective != "" }

// activities says what each rank of needs does: from the probes alone
// when they see its main thread wait in a collective (no stop) and no
// stack sample is wanted, else from one stack sample, a few ranks at
// once.
func (a *Agent) activities(needs []activityNeed) []rankActivity {
	acts := make([]rankActivity, len(needs))
	sampler := a.lagSampler()
	var wg sync.WaitGroup
	sem := make(chan struct{}, a.o.Parallel)
	for i, n := range needs {
		acts[i].active = n.active
		switch {
		case !n.stack && inCollective(n):
			acts[i].act = activity.Activity{Kind: activity.Collective, Detail: n.facts.Collective}
			continue
		case sampler == nil:
			// No stack to read: nothing more to learn until it issues.
			acts[i].act, acts[i].stack = activity.Activity{Kind: activity.Unknown}, true
			continue
		}
		acts[i].stack = true
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			acts[i].act = a.sampleActivity(sampler, n.pid, n.facts)
		}()
	}
	wg.Wait()
	return acts
}

// warnLag logs and reports a new warning; w.mu held.
func (a *Agent) warnLag(e *lagEpisode, now int64) {
	id, known := a.identity(e.PID)
	rank := e.Rank
	if known {
		rank = id.Rank
	}
	waited := time.Duration(now - e.Since).Seconds()
	a.log.Warn("lagging", "pid", e.PID, "rank", rank, "comm", metrics.ShortComm(e.Comm), "seq", e.Seq, "issued", e.Issued,
		"op", e.Op, "activity", e.act.Kind, "detail", e.act.Detail, "since", waited, "waiting_rank", e.PeerRank, "waiting", e.Peers)
	l := e.Laggard
	r := Report{Event: EventLagging, PID: e.PID, Comm: e.Comm, Seq: e.Seq, Op: e.Op, AgeSeconds: waited,
		Laggard: &l, Activity: string(e.act.Kind), Detail: e.act.Detail}
	if known {
		r.setRank(id)
	} else if rank >= 0 {
		r.Rank = &rank
	}
	a.report(r)
}

// facts are what the probes know a rank waits on, for the classifier.
func facts(aw timer.Await) activity.Facts {
	f := activity.Facts{TID: aw.TID, Call: aw.Call}
	if c := aw.Collective; c != nil {
		f.Collective = fmt.Sprintf("%s #%d on comm %s", c.Op, c.Seq, metrics.ShortComm(c.Comm))
	}
	if o := aw.Oldest; o != nil && o.Kind == timer.OpKernel {
		f.Kernel = o.Kernel
	}
	return f
}

// sampleActivity takes one stack sample of pid and says what it does.
func (a *Agent) sampleActivity(c Capturer, pid int, f activity.Facts) activity.Activity {
	p, err := c.Capture(pid)
	if err != nil {
		a.log.Debug("activity sample failed", "pid", pid, "err", err)
		return activity.Activity{Kind: activity.Unknown}
	}
	return activity.Classify(pid, p.Threads, f)
}

// lagSeries fills the early warning's series of the rank pid at now.
func (a *Agent) lagSeries(r *metrics.Rank, pid int, now int64) {
	ps := a.engine.Progress(pid, now)
	r.Comms = commSeries(ps, now)
	w := a.lag
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, e := range w.lags {
		if k.pid == pid {
			r.Lags = append(r.Lags, metrics.Lag{Comm: k.comm, Activity: string(e.act.Kind), Lagging: e.lagging})
		}
	}
	slices.SortFunc(r.Lags, func(x, y metrics.Lag) int { return strings.Compare(x.Comm, y.Comm) })
	if a.o.LagWarn <= 0 {
		return
	}
	active, ok := lastCollective(ps)
	if s, have := w.samples[pid]; ok && have && s.active == active && now-active >= a.idleAfter() {
		r.Activity = &metrics.Activity{Kind: string(s.act.Kind), Detail: s.act.Detail}
	}
}

// commSeries chooses the communicators a rank's metrics carry: those
// known by their id, the most recently active first, at most
// metrics.MaxComms, without those idle for CommIdle while the rank used
// another since (a communicator of one phase of the job).
func commSeries(ps []timer.CommProgress, now int64) []metrics.Comm {
	newest, ok := lastCollective(ps)
	if !ok {
		return nil
	}
	keep := make([]timer.CommProgress, 0, len(ps))
	for _, p := range ps {
		if local(p.ID) || newest-p.Active > int64(CommIdle) && p.Waiting == 0 {
			continue
		}
		keep = append(keep, p)
	}
	slices.SortStableFunc(keep, func(x, y timer.CommProgress) int { return cmp.Compare(y.Active, x.Active) })
	out := make([]metrics.Comm, 0, min(len(keep), metrics.MaxComms))
	for _, p := range keep[:min(len(keep), metrics.MaxComms)] {
		c := metrics.Comm{ID: p.ID, Issued: p.Issued, Completed: p.Completed}
		if p.Waiting > 0 {
			c.WaitSeconds = float64(now-p.WaitSince) / 1e9
		}
		out = append(out, c)
	}
	return out
}

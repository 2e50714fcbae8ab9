// Package lagwarn is the early warning (XPU_TIMER_LAG_WARN): before any
// hang is decided, it names the rank its peers wait for, says what that
// rank is doing, and gives where every rank stands on its communicators,
// so that the alert rules can compare ranks of every node. The agent runs
// a Check at each of its checks, feeding it the engine and the live
// ranks, and logs and reports what the Check found.
//
// Each check:
//   - a rank whose peers on this node have waited Warn in a collective it
//     has not issued (timer's Laggards) is warned of once per episode
//     (Result.Warnings; the gauge xpu_timer_rank_lagging 1, 0 once it
//     caught up: Result.CaughtUp), with its activity from one stack
//     sample of it alone;
//   - a rank with communicators that has issued no collective for about
//     Warn (one check interval less, so that its activity is out when
//     the warning of its peers' nodes is due) is sampled once per such
//     episode and its activity served (xpu_timer_rank_activity) until it
//     issues one again: on another node, its peers' warning joins it.
//     One whose main thread the probes see waiting in a collective is
//     not stopped: that collective is its activity.
//
// The loop checks just as a wait reaches the warning's, or a rank's
// silence its sampling point, rather than at the next interval (Due).
//
// A sample is the dumps' capture of that rank alone: its threads stopped
// once for at most a few milliseconds (a thread late to stop is copied
// when it stops, the others running), never a dump (no file, no marker, no other rank),
// and it sets no hang family. One sample serves both while the rank
// issues nothing new.
package lagwarn

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/activity"
	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/timer"
)

// CommIdle is how long a communicator a rank stopped using, while it
// used another since, stays in the metrics.
const CommIdle = 10 * time.Minute

// Engine is what the warning reads of the hang engine (*timer.Engine).
type Engine interface {
	Laggards(now int64, wait time.Duration) []timer.Laggard
	Progress(pid int, now int64) []timer.CommProgress
	Awaiting(pid int, now int64) (timer.Await, bool)
}

// Config sets a Watch up.
type Config struct {
	Warn     time.Duration // how long peers wait before the rank is named; 0: no warning
	Interval time.Duration // the agent's check period
	Parallel int           // ranks sampled at once
	// Sample takes one stack sample of pid and says what it does, the
	// probes' facts f helping; nil: activities are unknown.
	Sample func(pid int, f activity.Facts) activity.Activity
}

// Watch is the early warning's state. Safe for concurrent use.
type Watch struct {
	cfg     Config
	mu      sync.Mutex
	samples map[int]rankActivity // by pid: the latest sample and what the rank had issued then
	lags    map[lagKey]*lagEpisode
	next    int64 // when the next check is due that may warn or sample, if before the next interval's (0: none)
}

// New returns a Watch.
func New(cfg Config) *Watch {
	return &Watch{cfg: cfg, samples: map[int]rankActivity{}, lags: map[lagKey]*lagEpisode{}}
}

// Due is when the early warning wants a check (0: at the next interval).
func (w *Watch) Due() int64 {
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

// Result is what one Check found, in the order to tell it.
type Result struct {
	Idle     []Idle     // ranks idle long enough to be sampled, sampled now
	Warnings []Warning  // new warnings
	CaughtUp []CaughtUp // warnings that ended
}

// Idle is a rank sampled because it issued no collective for a while.
type Idle struct {
	PID      int
	Activity activity.Activity
	Since    time.Duration // since its last collective
}

// Warning is a rank its peers wait for, and what it does.
type Warning struct {
	timer.Laggard
	Activity activity.Activity
	Waited   time.Duration // how long its peers have waited
}

// CaughtUp is a warning that ended: the rank issued the awaited
// collective.
type CaughtUp struct {
	PID   int
	Comm  string
	Seq   uint64
	After time.Duration // since the peers began to wait
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
func (w *Watch) idleAfter() int64 {
	return int64(max(w.cfg.Warn-w.cfg.Interval, w.cfg.Warn/2))
}

// activityNeed is a rank whose activity is wanted at a check.
type activityNeed struct {
	pid    int
	active int64          // its latest collective
	facts  activity.Facts // what the probes know it waits on
	stack  bool           // a stack sample is wanted even when the probes know it waits in a collective (a new warning)
}

// Check runs the early warning's check at monotonic time now over the
// live ranks.
func (w *Watch) Check(e Engine, live []int, now int64) Result {
	warn := w.cfg.Warn
	if warn <= 0 {
		return Result{}
	}
	laggards := e.Laggards(now, warn)
	w.mu.Lock()
	fresh := map[int]bool{} // pids with a new warning
	for _, l := range laggards {
		if ep := w.lags[lagKey{l.PID, l.Comm}]; ep == nil || !ep.lagging {
			fresh[l.PID] = true
		}
	}
	w.mu.Unlock()
	var needs []activityNeed
	var next int64 // the next check a wait or an idle rank will want
	soon := func(at int64) {
		if at > now && at < now+int64(w.cfg.Interval) && (next == 0 || at < next) {
			next = at
		}
	}
	for _, pid := range live {
		ps := e.Progress(pid, now)
		for _, p := range ps {
			if p.Waiting > 0 {
				soon(p.WaitSince + int64(warn)) // a peer of it may be warned of then
			}
		}
		active, ok := lastCollective(ps)
		if ok {
			soon(active + w.idleAfter())
		}
		if !ok || now-active < w.idleAfter() && !fresh[pid] {
			continue
		}
		n := activityNeed{pid: pid, active: active, stack: fresh[pid]}
		if aw, ok := e.Awaiting(pid, now); ok {
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
	acts := w.activities(needs)

	var res Result
	w.mu.Lock()
	defer w.mu.Unlock()
	w.next = next
	for i, n := range needs {
		w.samples[n.pid] = acts[i]
		if !fresh[n.pid] {
			res.Idle = append(res.Idle, Idle{PID: n.pid, Activity: acts[i].act, Since: time.Duration(now - n.active)})
		}
	}
	// New warnings, then those that ended.
	behind := map[lagKey]bool{}
	for _, l := range laggards {
		k := lagKey{l.PID, l.Comm}
		behind[k] = true
		if ep := w.lags[k]; ep != nil && ep.lagging {
			ep.Laggard = l
			continue
		}
		act := w.samples[l.PID].act
		if act.Kind == "" {
			act.Kind = activity.Unknown // not a live rank: never sampled
		}
		w.lags[k] = &lagEpisode{Laggard: l, act: act, lagging: true}
		res.Warnings = append(res.Warnings, Warning{Laggard: l, Activity: act, Waited: time.Duration(now - l.Since)})
	}
	for k, ep := range w.lags {
		if !slices.Contains(live, k.pid) {
			delete(w.lags, k)
			continue
		}
		if ep.lagging && !behind[k] {
			ep.lagging = false
			res.CaughtUp = append(res.CaughtUp, CaughtUp{PID: k.pid, Comm: k.comm, Seq: ep.Seq, After: time.Duration(now - ep.Since)})
		}
	}
	for pid := range w.samples {
		if !slices.Contains(live, pid) {
			delete(w.samples, pid)
		}
	}
	return res
}

// inCollective says whether the probes see the main thread of a rank
// wait in a collective.
func inCollective(n activityNeed) bool { return n.facts.TID == n.pid && n.facts.Collective != "" }

// activities says what each rank of needs does: from the probes alone
// when they see its main thread wait in a collective (no stop) and no
// stack sample is wanted, else from one stack sample, a few ranks at
// once.
func (w *Watch) activities(needs []activityNeed) []rankActivity {
	acts := make([]rankActivity, len(needs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, max(w.cfg.Parallel, 1))
	for i, n := range needs {
		acts[i].active = n.active
		switch {
		case !n.stack && inCollective(n):
			acts[i].act = activity.Activity{Kind: activity.Collective, Detail: n.facts.Collective}
			continue
		case w.cfg.Sample == nil:
			// No stack to read: nothing more to learn until it issues.
			acts[i].act, acts[i].stack = activity.Activity{Kind: activity.Unknown}, true
			continue
		}
		acts[i].stack = true
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			acts[i].act = w.cfg.Sample(n.pid, n.facts)
		}()
	}
	wg.Wait()
	return acts
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

// Series fills the early warning's series of the rank pid at now.
func (w *Watch) Series(r *metrics.Rank, e Engine, pid int, now int64) {
	ps := e.Progress(pid, now)
	r.Comms = CommSeries(ps, now)
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, ep := range w.lags {
		if k.pid == pid {
			r.Lags = append(r.Lags, metrics.Lag{Comm: k.comm, Activity: string(ep.act.Kind), Lagging: ep.lagging})
		}
	}
	slices.SortFunc(r.Lags, func(x, y metrics.Lag) int { return strings.Compare(x.Comm, y.Comm) })
	if w.cfg.Warn <= 0 {
		return
	}
	active, ok := lastCollective(ps)
	if s, have := w.samples[pid]; ok && have && s.active == active && now-active >= w.idleAfter() {
		r.Activity = &metrics.Activity{Kind: string(s.act.Kind), Detail: s.act.Detail}
	}
}

// CommSeries chooses the communicators a rank's metrics carry: those
// known by their id, the most recently active first, at most
// metrics.MaxComms, without those idle for CommIdle while the rank used
// another since (a communicator of one phase of the job).
func CommSeries(ps []timer.CommProgress, now int64) []metrics.Comm {
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

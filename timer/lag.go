package timer

import (
	"slices"
	"strings"
	"time"
)

// CommProgress is where one process stands on one communicator: the
// sequence numbers it issued and saw complete, and the collective its
// threads wait in (see "Lagging ranks" in the package comment).
type CommProgress struct {
	CommState
	// Active is when the process last issued a collective on it, or
	// created it (monotonic ns).
	Active int64 `json:"active_ns"`
	// Waiting is the collective of it a thread of the process waits in:
	// the oldest not known complete of the work a waiter awaits, once
	// the thread has waited ProgressWait; 0 when none does. WaitSince is
	// since when the thread waiting longest on it waits.
	Waiting   uint64 `json:"waiting,omitempty"`
	WaitSince int64  `json:"wait_since_ns,omitempty"`
}

// ProgressWait is how long a thread waits before Progress says in which
// collective: shorter waits are a healthy job's, and looking costs a walk
// of the work it awaits under the engine's lock.
const ProgressWait = time.Second

// Progress reports what pid knows of its communicators at time now, in
// order of creation.
func (e *Engine) Progress(pid int, now int64) []CommProgress {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.procs[pid]
	if p == nil {
		return nil
	}
	waits := p.collectiveWaits(now, e.cfg.PollRepeat, e.timeout, int64(ProgressWait))
	cs := p.commStates()
	out := make([]CommProgress, len(cs))
	for i, c := range cs {
		out[i] = CommProgress{CommState: c}
		if cm := p.commByID(c.ID); cm != nil {
			out[i].Active = cm.last
		}
		if w, ok := waits[c.ID]; ok {
			out[i].Waiting, out[i].WaitSince = w.seq, w.since
		}
	}
	return out
}

// collWait is where a process's threads wait on one communicator: the
// lowest collective not known complete they await, and since when the
// earliest of them waits.
type collWait struct {
	seq   uint64
	since int64
	op    *qop // the collective at seq
}

// collectiveWaits finds, per communicator, the collective p's waiters
// (timeout: the engine's, see proc.waiters) that have waited at least
// least wait in.
func (p *proc) collectiveWaits(now int64, repeat int, timeout, least int64) map[string]collWait {
	var out map[string]collWait
	for _, w := range p.waiters(now, repeat, timeout) {
		if now-w.Since < least {
			continue
		}
		sp := p.awaitedSpan(w.targets)
		for id, low := range sp.low {
			if out == nil {
				out = make(map[string]collWait)
			}
			cw, ok := out[id]
			if !ok || low.seq < cw.seq {
				cw.seq, cw.op = low.seq, low
			}
			if !ok || w.Since < cw.since {
				cw.since = w.Since
			}
			out[id] = cw
		}
	}
	return out
}

// Laggard is a process that has not issued the collective its peers wait
// in, on one communicator (see "Lagging ranks" in the package comment).
type Laggard struct {
	PID      int    `json:"pid"`
	Rank     int    `json:"rank"` // -1 if unknown
	Comm     string `json:"comm"`
	Issued   uint64 `json:"issued"` // the last collective it issued on Comm
	Seq      uint64 `json:"seq"`    // the collective its peers wait in (Issued < Seq)
	Op       string `json:"op,omitempty"`
	PeerPID  int    `json:"peer_pid"`  // the peer waiting longest
	PeerRank int    `json:"peer_rank"` // -1 if unknown
	Peers    int    `json:"peers"`     // processes waiting in a collective of Comm it has not issued
	Since    int64  `json:"since_ns"`  // since when the peer waiting longest waits (monotonic ns)
}

// Laggards lists, at time now, the processes behind on a communicator:
// a peer has waited at least wait in a collective of it that they have
// not issued. By process, then communicator; none when wait is not
// positive.
func (e *Engine) Laggards(now int64, wait time.Duration) []Laggard {
	if wait <= 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	procs := make([]*proc, 0, len(e.procs))
	for _, p := range e.procs {
		procs = append(procs, p)
	}
	slices.SortFunc(procs, func(a, b *proc) int { return a.pid - b.pid })
	type key struct {
		pid  int
		comm string
	}
	found := map[key]*Laggard{}
	peers := map[key]map[int]bool{}
	for _, p := range procs {
		for id, w := range p.collectiveWaits(now, e.cfg.PollRepeat, e.timeout, int64(wait)) {
			if isLocal(id) {
				continue
			}
			for _, q := range procs {
				c := q.commByID(id)
				if q == p || c == nil || c.issued >= w.seq {
					continue
				}
				k := key{q.pid, id}
				l := found[k]
				if l == nil {
					l = &Laggard{PID: q.pid, Rank: q.rank, Comm: id, Issued: c.issued, Seq: w.seq, Op: w.op.coll.String(),
						PeerPID: p.pid, PeerRank: p.rank, Since: w.since}
					found[k], peers[k] = l, map[int]bool{}
				}
				peers[k][p.pid] = true
				if w.seq < l.Seq {
					l.Seq, l.Op = w.seq, w.op.coll.String()
				}
				if w.since < l.Since {
					l.Since, l.PeerPID, l.PeerRank = w.since, p.pid, p.rank
				}
			}
		}
	}
	out := make([]Laggard, 0, len(found))
	for k, l := range found {
		l.Peers = len(peers[k])
		out = append(out, *l)
	}
	slices.SortFunc(out, func(a, b Laggard) int {
		if a.PID != b.PID {
			return a.PID - b.PID
		}
		return strings.Compare(a.Comm, b.Comm)
	})
	return out
}

// Await is what a process's longest-waiting thread waits on.
type Await struct {
	TID        int    `json:"tid"`
	Call       string `json:"call"`
	Since      int64  `json:"since_ns"`
	Oldest     *Op    `json:"oldest,omitempty"`     // the oldest awaited op not known complete
	Collective *Op    `json:"collective,omitempty"` // the oldest awaited collective not known complete
}

// Awaiting reports, at time now, what pid's thread waiting longest on
// GPU work not known complete waits on; false when none waits.
func (e *Engine) Awaiting(pid int, now int64) (Await, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p := e.procs[pid]
	if p == nil {
		return Await{}, false
	}
	var best *waiting
	ws := p.waiters(now, e.cfg.PollRepeat, e.timeout)
	for i := range ws {
		if p.awaited(ws[i].targets) != nil && (best == nil || ws[i].Since < best.Since) {
			best = &ws[i]
		}
	}
	if best == nil {
		return Await{}, false
	}
	a := Await{TID: best.TID, Call: best.Call, Since: best.Since}
	sp := p.awaitedSpan(best.targets)
	if sp.oldest != nil {
		o := sp.oldest.op()
		a.Oldest = &o
	}
	if sp.coll != nil {
		c := sp.coll.op()
		a.Collective = &c
	}
	return a, true
}

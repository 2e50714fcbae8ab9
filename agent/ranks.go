package agent

import (
	"slices"
	"sync"
)

// rankBook is the agent's record of the processes it traces: which made GPU
// calls (the ranks), where each stands in its job (from its environment,
// else numbered by order of appearance), whether it was announced, exited,
// or is being dumped. Its methods only keep the record; the Agent reads
// environments, tells the engine and reports (ranks.go's Agent methods).
type rankBook struct {
	mu    sync.Mutex
	procs map[int]*procInfo
	order int // next number for a process without RANK
}

// procInfo is what the loop knows of one traced process.
type procInfo struct {
	pid       int
	id        Identity
	idTries   int
	gpu       bool // made a GPU call: a rank
	exited    bool
	announced bool

	dumpStarted bool
	dumpSeconds float64
}

func newRankBook() *rankBook { return &rankBook{procs: make(map[int]*procInfo)} }

// see records that pid is traced; gpu says it made a GPU call, reread that
// its environment may have changed (exec). It returns whether anything
// changed, whether the identity is to be read (again), and whether this is
// the process's first GPU call.
func (b *rankBook) see(pid int, gpu, reread bool) (changed, fresh, firstGPU bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p != nil && !reread && (p.gpu || !gpu) {
		return false, false, false
	}
	fresh = p == nil || reread
	firstGPU = gpu && (p == nil || !p.gpu)
	if p == nil {
		p = &procInfo{pid: pid, id: Identity{Rank: -1, LocalRank: -1}}
		b.procs[pid] = p
	}
	if reread {
		p.exited = false
	}
	p.gpu = p.gpu || gpu
	return true, fresh, firstGPU
}

// resolved records one look at pid's environment (env, or the error reading
// it). A process without RANK that is a rank is numbered by order of
// appearance when final or when its environment cannot be read. ok is false
// for a process unknown or gone.
func (b *rankBook) resolved(pid int, env map[string]string, err error, final bool) (id Identity, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p == nil || p.exited {
		return Identity{}, false
	}
	p.idTries++
	if err == nil {
		if id := IdentityOf(env); id.FromEnv {
			p.id = id
		}
	}
	if !p.id.FromEnv && p.gpu && p.id.Rank < 0 && (final || err != nil) {
		b.assignOrder(p)
	}
	return p.id, true
}

// assignOrder numbers a process without RANK; b.mu held.
func (b *rankBook) assignOrder(p *procInfo) {
	p.id.Rank = b.order
	b.order++
}

// announce marks pid announced once its identity is settled; ok says it is
// to be announced now.
func (b *rankBook) announce(pid int) (id Identity, gpu, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p == nil || p.announced || p.exited || !(p.id.FromEnv || (p.gpu && p.id.Rank >= 0)) {
		return Identity{}, false, false
	}
	p.announced = true
	return p.id, p.gpu, true
}

// unsettled lists the live ranks whose identity is not settled, and for
// each whether the next look is the last (after three looks a process
// without RANK is numbered by order).
func (b *rankBook) unsettled() (pids []int, final []bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for pid, p := range b.procs {
		if !p.exited && p.gpu && !p.id.FromEnv && p.id.Rank < 0 {
			pids = append(pids, pid)
			final = append(final, p.idTries >= 2)
		}
	}
	return pids, final
}

// identity returns pid's identity once it is settled.
func (b *rankBook) identity(pid int) (Identity, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p == nil || (!p.id.FromEnv && p.id.Rank < 0) {
		return Identity{}, false
	}
	return p.id, true
}

// exit marks pid exited; ok is false when it was unknown or already gone,
// rank says it was a rank.
func (b *rankBook) exit(pid int) (id Identity, rank, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p == nil || p.exited {
		return Identity{}, false, false
	}
	p.exited = true
	return p.id, p.gpu || p.id.FromEnv, true
}

// gone says whether pid is unknown or exited.
func (b *rankBook) gone(pid int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	return p == nil || p.exited
}

// setDumpStarted sets the dump-started flag of the ranks pids.
func (b *rankBook) setDumpStarted(v bool, pids ...int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, pid := range pids {
		if p := b.procs[pid]; p != nil {
			p.dumpStarted = v
		}
	}
}

// setDumpSeconds records how long pid's last dump took.
func (b *rankBook) setDumpSeconds(pid int, secs float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.procs[pid]; p != nil {
		p.dumpSeconds = secs
	}
}

// ranks lists the live rank processes (those with RANK or a GPU call), by
// rank then pid. Processes without RANK are numbered now if they are not
// yet, and given the world size of those numbered.
func (b *rankBook) ranks() []procInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []procInfo
	unknown := 0
	for _, p := range b.procs {
		if p.exited || !(p.gpu || p.id.FromEnv) {
			continue
		}
		if !p.id.FromEnv {
			unknown++
		}
		out = append(out, *p)
	}
	for i := range out {
		if !out[i].id.FromEnv {
			if out[i].id.Rank < 0 {
				p := b.procs[out[i].pid]
				b.assignOrder(p)
				out[i].id.Rank = p.id.Rank
			}
			out[i].id.World = max(b.order, unknown)
		}
		if out[i].id.World <= out[i].id.Rank {
			out[i].id.World = out[i].id.Rank + 1
		}
	}
	slices.SortFunc(out, func(x, y procInfo) int {
		if x.id.Rank != y.id.Rank {
			return x.id.Rank - y.id.Rank
		}
		return x.pid - y.pid
	})
	return out
}

// live lists the live rank processes (those with RANK or a GPU call), as
// ranks does, without numbering any.
func (b *rankBook) live() []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for _, p := range b.procs {
		if !p.exited && (p.gpu || p.id.FromEnv) {
			out = append(out, p.pid)
		}
	}
	slices.Sort(out)
	return out
}

// see records that pid is traced and, when that tells something new, warms
// the capture for a first GPU call and reads or announces its identity.
func (a *Agent) see(pid int, gpu, reread bool) {
	changed, fresh, firstGPU := a.book.see(pid, gpu, reread)
	if !changed {
		return
	}
	if w, ok := a.o.Capturer.(Warmer); ok && firstGPU {
		go w.Warm(pid)
	}
	if fresh {
		a.resolve(pid, false)
	} else {
		a.announce(pid)
	}
}

// resolve reads pid's identity from its environment. A process without
// RANK is looked at again on later ticks, then, when it is a rank (it made
// GPU calls), numbered by order of appearance (final).
func (a *Agent) resolve(pid int, final bool) {
	env, err := a.o.Environ(pid)
	id, ok := a.book.resolved(pid, env, err, final)
	if !ok {
		return
	}
	if id.FromEnv {
		a.engine.SetIdentity(pid, id.Rank, id.World)
	}
	a.announce(pid)
}

// announce reports a rank once its identity is settled.
func (a *Agent) announce(pid int) {
	id, gpu, ok := a.book.announce(pid)
	if !ok {
		return
	}
	r := Report{Event: "rank", PID: pid}
	r.setRank(id)
	if id.FromEnv {
		r.Identity = "environment"
		a.log.Info("rank", "pid", pid, "rank", id.Rank, "world_size", id.World, "local_rank", id.LocalRank, "gpu_calls", gpu)
	} else {
		r.Identity = "assumed: no RANK in its environment, numbered by order of appearance"
		a.log.Warn("process has no RANK in its environment; numbering it by order of appearance", "pid", pid, "rank", id.Rank)
	}
	a.report(r)
}

// settle looks again at ranks whose identity is not settled (called every
// tick): after three looks a process without RANK is numbered by order.
func (a *Agent) settle() {
	pids, final := a.book.unsettled()
	for i, pid := range pids {
		a.resolve(pid, final[i])
	}
}

// identity returns pid's identity once it is settled.
func (a *Agent) identity(pid int) (Identity, bool) { return a.book.identity(pid) }

// ranks lists the live rank processes, by rank then pid.
func (a *Agent) ranks() []procInfo { return a.book.ranks() }

// exited forgets pid's flight recorder and reports a rank's exit once.
func (a *Agent) exited(pid int) {
	id, rank, ok := a.book.exit(pid)
	if !ok {
		return
	}
	a.rec.Forget(pid)
	a.forgetLooks(pid)
	if rank {
		r := Report{Event: "exit", PID: pid}
		r.setRank(id)
		a.report(r)
	}
}

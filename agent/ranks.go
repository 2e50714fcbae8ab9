package agent

import (
	"context"
	"log/slog"
	"slices"
	"sync"

	"github.com/xpu-timer/xpu-timer/agent/election"
	"github.com/xpu-timer/xpu-timer/agent/identity"
	"github.com/xpu-timer/xpu-timer/timer"
)

// rankBook is the agent's record of the processes it traces: which are
// ranks, where each stands in its job (from its environment, else from its
// first communicator, else numbered by order of appearance), whether it was
// announced, exited, or is being dumped. Its methods only keep the record;
// the Agent reads environments, tells the engine and reports (ranks.go's
// Agent methods).
//
// A rank is one process. Which process of those that share an identity
// is the rank, and which are its helpers, wrappers and shadows, is
// decided by package election, from what the book knows of each; the
// book stores each process's Role and calls election.Elect after every
// change that may move one.
//
// Incarnations: where the launcher sets no restart count
// (TORCHELASTIC_RESTART_COUNT, SLURM_RESTART_COUNT), the book counts restarts itself, per job:
// when a rank (job, rank) is taken by a new process after the process
// that held it exited, and that process is no descendant of it (a worker
// it forked), the job's count goes up by one, once per restart however
// many of its ranks come back; the other ranks of the job that come back
// take the new count. The count starts at 0 when the agent first sees the
// job: restarts before it attached are unknown to it, so its incarnation
// 0 may be the job's third run.
type rankBook struct {
	mu    sync.Mutex
	procs map[int]*procInfo
	order int    // next number for a process without RANK
	exits uint64 // exits so far (procInfo.exitSeq)

	created  uint64                // processes the book has known (procInfo.seen)
	restarts map[string]int        // job -> incarnations counted here (see incarnate)
	holders  map[rankSlot]*holding // (job, rank) -> its latest holder
}

// rankSlot is a rank of a job.
type rankSlot struct {
	job  string
	rank int
}

// holding is the latest incarnation of a rank of a job whose launcher
// counts no restarts: whether its rank process exited, which, and when.
type holding struct {
	incarnation int
	exited      bool
	pid         int // the rank process that exited
	exitSeq     uint64
}

// maxExited is how many exited processes the record keeps (see prune),
// and how many ranks whose holder exited it remembers (see pruneHolders).
const maxExited = 1024

// procInfo is what the loop knows of one traced process.
type procInfo struct {
	pid       int
	id        Identity
	idTries   int
	gpu       bool   // made a GPU call
	comm      bool   // created a communicator
	python    bool   // runs a Python interpreter
	ppid      int    // parent process, 0 when unknown
	forkedBy  int    // the process that forked it, as the fork was traced (0 when not seen)
	seen      uint64 // when the book first knew it (rankBook.created)
	announced bool

	role     election.Role // from the last election (see package election)
	helperOf int           // the rank a Helper helps
	last     election.Role // the role it held when it exited (role is Exited)
	exitSeq  uint64        // b.exits at its exit

	counted bool // its incarnation was counted here (the launcher sets none)
	inc     int  // that incarnation

	dumpStarted bool
	dumpSeconds float64
}

// exited says whether p exited.
func (p *procInfo) exited() bool { return p.role == election.Exited }

func newRankBook() *rankBook {
	return &rankBook{procs: make(map[int]*procInfo), restarts: make(map[string]int), holders: make(map[rankSlot]*holding)}
}

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
		p = b.newProc(pid)
	}
	if reread {
		// A new image: its part is decided again (see elect).
		p.role, p.helperOf = election.Candidate, 0
	}
	p.gpu = p.gpu || gpu
	return true, fresh, firstGPU
}

// forked records that pid was forked by parent (a traced fork; parent 0
// for an exec, which changes nothing). The record is made here when pid is
// new, so that the ancestry holds even when the parent has exited by the
// time pid's /proc is read.
func (b *rankBook) forked(pid, parent int) {
	if parent == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p == nil {
		p = b.newProc(pid)
	}
	p.forkedBy, p.ppid = parent, parent
}

// newProc records pid, new to the book; b.mu held.
func (b *rankBook) newProc(pid int) *procInfo {
	b.created++
	p := &procInfo{pid: pid, id: Identity{Rank: -1, LocalRank: -1}, seen: b.created}
	b.procs[pid] = p
	return p
}

// resolved records one look at pid's environment (env, or the error reading
// it), its parent and whether it runs Python. A process without an
// identity that is a rank is numbered by order of appearance when final or
// when its environment cannot be read. ok is false for a process unknown
// or gone.
func (b *rankBook) resolved(pid int, env map[string]string, err error, final bool, ppid int, python bool) (id Identity, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p == nil || p.exited() || p.role == election.Outside {
		return Identity{}, false
	}
	p.idTries++
	p.python = python
	switch {
	case p.forkedBy != 0:
		p.ppid = p.forkedBy // the parent at the fork: /proc names a reaper once it exits
	case ppid != 0:
		p.ppid = ppid
	}
	if err == nil {
		if id := identity.Of(env); id.FromEnv {
			p.id = id
		} else if p.id.Job == "" {
			p.id.Job, p.id.Incarnation = id.Job, id.Incarnation
		}
	}
	if !p.id.FromEnv && p.gpu && p.id.Rank < 0 && (final || err != nil) {
		b.assignOrder(p)
	}
	b.elect()
	b.incarnate(p)
	return p.id, true
}

// fromComm takes pid's identity from the first communicator it created
// (ncclCommInitRank's rank and size) when its environment named none; it
// says whether the identity changed.
func (b *rankBook) fromComm(pid, rank, world int) (Identity, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p == nil || p.exited() {
		return Identity{}, false
	}
	first := !p.comm
	p.comm = true
	if p.id.FromEnv || !first || rank < 0 || world <= rank {
		b.elect()
		return p.id, false
	}
	p.id.Rank, p.id.World, p.id.LocalRank, p.id.Source = rank, world, -1, "nccl"
	p.announced = false // announced again, with its real rank
	b.elect()
	b.incarnate(p)
	return p.id, true
}

// incarnate gives p, once its rank is known, the incarnation the book
// counts for its job when its environment gives none (see rankBook); b.mu
// held.
func (b *rankBook) incarnate(p *procInfo) {
	if p.exited() || p.id.Rank < 0 || !(p.id.FromEnv || p.id.Source == "nccl") {
		return
	}
	if p.counted {
		p.id.Incarnation = p.inc // an environment read again says nothing new
		return
	}
	if p.id.Incarnation >= 0 {
		return // the launcher counts
	}
	s := rankSlot{p.id.Job, p.id.Rank}
	h := b.holders[s]
	n := b.restarts[p.id.Job]
	switch {
	case h == nil:
		// The first process of this rank the book sees.
		h = &holding{incarnation: n}
		b.holders[s] = h
	case !h.exited || b.descends(p, h.pid):
		// The rank lives (p is its wrapper, its python or its helper), or
		// p is a worker the exited rank forked: the same incarnation.
	case h.incarnation == n:
		// The first rank of the job to come back: a restart.
		b.restarts[p.id.Job] = n + 1
		fallthrough
	default:
		// A rank of the job comes back after its first.
		*h = holding{incarnation: b.restarts[p.id.Job]}
	}
	p.counted, p.inc, p.id.Incarnation = true, h.incarnation, h.incarnation
}

// descends says whether p descends from the process pid; b.mu held.
func (b *rankBook) descends(p *procInfo, pid int) bool {
	parent := func(pid int) int {
		if q := b.procs[pid]; q != nil {
			return q.ppid
		}
		return 0
	}
	for a := range election.Lineage(parent, p.pid, len(b.procs)) {
		if a == pid {
			return true
		}
	}
	return false
}

// assignOrder numbers a process without an identity; b.mu held.
func (b *rankBook) assignOrder(p *procInfo) {
	p.id.Rank = b.order
	p.id.Source = "order"
	b.order++
}

// isRank says whether p is a live rank.
func (p *procInfo) isRank() bool { return p.role == election.Rank }

// elect gives every process its role (package election); a process that
// is not the rank is announced again should it be the rank after (it
// execs Python after its helper that ran Python, and was the rank
// meanwhile, exited: the last announcement of a rank names its process);
// b.mu held.
func (b *rankBook) elect() {
	infos := make([]*procInfo, 0, len(b.procs))
	ps := make([]election.Process, 0, len(b.procs))
	for _, p := range b.procs {
		infos = append(infos, p)
		ps = append(ps, p.voter())
	}
	for i, v := range election.Elect(ps) {
		p := infos[i]
		if p.exited() {
			continue
		}
		if v.Role != election.Rank {
			p.announced = false
		}
		p.role, p.helperOf = v.Role, v.Of
	}
}

// voter is what the election knows of p.
func (p *procInfo) voter() election.Process {
	role := p.role
	if p.exited() {
		role = p.last
	}
	return election.Process{
		PID: p.pid, Parent: p.ppid,
		Key:   election.Key{Job: p.id.Job, Rank: p.id.Rank, World: p.id.World},
		Known: p.id.FromEnv || p.id.Source == "nccl", Env: p.id.FromEnv,
		GPU: p.gpu, Comm: p.comm, Python: p.python, Seen: p.seen,
		Exited: p.exited(), Role: role, Of: p.helperOf,
	}
}

// helpers lists the live helpers of rank pid.
func (b *rankBook) helpers(pid int) []int {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []int
	for _, p := range b.procs {
		if p.role == election.Helper && p.helperOf == pid {
			out = append(out, p.pid)
		}
	}
	slices.Sort(out)
	return out
}

// announcement is what the book tells of a rank it announces.
type announcement struct {
	id     Identity
	gpu    bool // made GPU calls
	python bool // runs Python
	ppid   int  // its parent (the forker, when the fork was traced), 0 when unknown
}

// announce marks pid announced once its identity is settled; ok says it is
// to be announced now.
func (b *rankBook) announce(pid int) (an announcement, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p == nil || p.announced || !p.isRank() || p.id.Rank < 0 {
		return announcement{}, false
	}
	p.announced = true
	return announcement{id: p.id, gpu: p.gpu, python: p.python, ppid: p.ppid}, true
}

// unsettled lists the live ranks whose identity is not settled, and for
// each whether the next look is the last (after three looks a process
// without RANK is numbered by order).
func (b *rankBook) unsettled() (pids []int, final []bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for pid, p := range b.procs {
		if !p.exited() && p.role != election.Outside && (p.gpu || p.comm) && !p.id.FromEnv && p.id.Rank < 0 {
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
	if p == nil || p.exited() {
		return Identity{}, false, false
	}
	rank = p.isRank()
	p.last, p.role = p.role, election.Exited
	b.exits++
	p.exitSeq = b.exits
	if h := b.holders[rankSlot{p.id.Job, p.id.Rank}]; rank && p.counted && h != nil && !h.exited && h.incarnation == p.inc {
		h.pid, h.exited, h.exitSeq = p.pid, true, b.exits
	}
	b.elect()
	b.prune()
	b.pruneHolders()
	return p.id, rank, true
}

// pruneHolders forgets the ranks whose holder exited beyond the newest
// maxExited, oldest exit first, and the counts of jobs with no rank left
// in the record: a node that runs job after job keeps the record bounded;
// b.mu held.
func (b *rankBook) pruneHolders() {
	var gone []rankSlot
	for s, h := range b.holders {
		if h.exited {
			gone = append(gone, s)
		}
	}
	if len(gone) <= maxExited {
		return
	}
	slices.SortFunc(gone, func(x, y rankSlot) int { return int(b.holders[x].exitSeq - b.holders[y].exitSeq) })
	for _, s := range gone[:len(gone)-maxExited] {
		delete(b.holders, s)
	}
	jobs := make(map[string]bool, len(b.holders))
	for s := range b.holders {
		jobs[s.job] = true
	}
	for j := range b.restarts {
		if !jobs[j] {
			delete(b.restarts, j)
		}
	}
}

// prune forgets exited processes beyond the newest maxExited, oldest
// exit first, sparing those a remembered process names as its parent (the
// ancestry of live processes through exited ones stays whole). An exited
// process is remembered a while so that a late event of its threads does
// not make it a rank again; a job that forks without end (a shell loop)
// keeps the record bounded; b.mu held.
func (b *rankBook) prune() {
	var gone []*procInfo
	parents := make(map[int]bool, len(b.procs))
	for _, p := range b.procs {
		parents[p.ppid] = true
		if p.exited() {
			gone = append(gone, p)
		}
	}
	if len(gone) <= maxExited {
		return
	}
	slices.SortFunc(gone, func(x, y *procInfo) int { return int(x.exitSeq - y.exitSeq) })
	for _, p := range gone[:len(gone)-maxExited] {
		if !parents[p.pid] {
			delete(b.procs, p.pid)
		}
	}
}

// gone says whether pid is unknown or exited.
func (b *rankBook) gone(pid int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	return p == nil || p.exited()
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
		if !p.isRank() {
			continue
		}
		if !p.id.FromEnv && p.id.Source != "nccl" {
			unknown++
		}
		out = append(out, *p)
	}
	for i := range out {
		if !out[i].id.FromEnv && out[i].id.Source != "nccl" {
			if out[i].id.Rank < 0 {
				p := b.procs[out[i].pid]
				b.assignOrder(p)
				out[i].id.Rank = p.id.Rank
				out[i].id.Source = p.id.Source
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
		if p.isRank() {
			out = append(out, p.pid)
		}
	}
	slices.Sort(out)
	return out
}

// exclude marks pid out of scope; ok is false when it is unknown or gone.
func (b *rankBook) exclude(pid int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p == nil || p.exited() {
		return false
	}
	p.role, p.helperOf = election.Outside, 0
	b.elect()
	return true
}

// outside says whether pid is out of scope.
func (b *rankBook) outside(pid int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	return p != nil && p.role == election.Outside
}

// see records that pid is traced and, when that tells something new, warms
// the capture for a first GPU call and reads or announces its identity.
func (a *Agent) see(pid int, gpu, reread bool) {
	changed, fresh, firstGPU := a.book.see(pid, gpu, reread)
	if !changed {
		return
	}
	if fresh {
		a.resolve(pid, false)
	}
	if w, ok := a.o.Capturer.(Warmer); ok && firstGPU && !a.book.outside(pid) {
		go w.Warm(pid)
	}
}

// resolve reads pid's identity from its environment. A process without
// RANK is looked at again on later ticks, then, when it is a rank (it made
// GPU calls), numbered by order of appearance (final).
func (a *Agent) resolve(pid int, final bool) {
	env, err := a.o.Environ(pid)
	if !a.admit(pid, env, err) {
		return
	}
	ppid, python := a.o.Parent(pid)
	id, ok := a.book.resolved(pid, env, err, final, ppid, python)
	if !ok {
		return
	}
	if id.FromEnv {
		a.engine.SetIdentity(pid, id.Rank, id.World)
	}
}

// commCreated takes the identity of a process that has none from its
// first communicator (ncclCommInitRank's rank and size).
func (a *Agent) commCreated(ev timer.Event) {
	id, changed := a.book.fromComm(ev.PID, int(ev.Rank), int(ev.NRanks))
	if changed {
		a.engine.SetIdentity(ev.PID, id.Rank, id.World)
	}
}

// announce reports a rank once its identity is settled.
func (a *Agent) announce(pid int) {
	an, ok := a.book.announce(pid)
	if !ok {
		return
	}
	id := an.id
	r := Report{Event: EventRank, PID: pid}
	r.setRank(id)
	level, msg, attrs := slog.LevelInfo, "rank", []any{"pid", pid, "rank", id.Rank}
	switch {
	case id.FromEnv:
		r.Identity = "environment (" + id.Source + ")"
		attrs = append(attrs, "world_size", id.World, "local_rank", id.LocalRank, "from", id.Source, "gpu_calls", an.gpu)
	case id.Source == "nccl":
		r.Identity = "communicator: no rank in its environment, the rank and size of its first communicator"
		attrs = append(attrs, "world_size", id.World, "from", "nccl communicator", "gpu_calls", an.gpu)
	default:
		r.Identity = "assumed: no RANK in its environment, numbered by order of appearance"
		level, msg = slog.LevelWarn, "process has no RANK in its environment; numbering it by order of appearance"
	}
	// Which process took the rank, and why (see rankBook): its parent and
	// whether it runs Python, for a rank that is not the one expected.
	a.log.Log(context.Background(), level, msg, append(attrs, "ppid", an.ppid, "python", an.python)...)
	a.report(r)
}

// settle looks again at ranks whose identity is not settled (called every
// tick): after three looks a process without RANK is numbered by order.
// Then it announces the ranks not announced yet: at the tick, so that the
// processes that share an identity and start together (a shell and the
// python it runs, a rank and its DataLoader workers) are told apart first.
func (a *Agent) settle() {
	pids, final := a.book.unsettled()
	for i, pid := range pids {
		a.resolve(pid, final[i])
	}
	for _, pid := range a.book.live() {
		a.announce(pid)
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
		r := Report{Event: EventExit, PID: pid}
		r.setRank(id)
		a.report(r)
	}
}

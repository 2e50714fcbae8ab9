package ranks

import (
	"slices"
	"sync"

	"github.com/xpu-timer/xpu-timer/ranks/election"
	"github.com/xpu-timer/xpu-timer/ranks/identity"
)

// Book is the agent's record of the processes it traces: which are
// ranks, where each stands in its job (from its environment, else from its
// first communicator, else numbered by order of appearance), whether it was
// announced, exited, or is being dumped. Its methods only keep the record
// and read nothing; the agent reads environments (the looks the book asks
// for), tells the engine and reports (agent/ranks.go). Safe for
// concurrent use.
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
type Book struct {
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
	id        identity.Identity
	idTries   int
	unread    bool   // its environment is to be read (it is new, or exec'd)
	gen       uint64 // its images so far (Look.gen)
	commRank  int    // the rank and size of its first communicator, when it
	commWorld int    // was created before the environment was read
	warmed    bool   // TakeWarm said yes
	gpu       bool   // made a GPU call
	comm      bool   // created a communicator
	python    bool   // runs a Python interpreter
	ppid      int    // parent process, 0 when unknown
	forkedBy  int    // the process that forked it, as the fork was traced (0 when not seen)
	seen      uint64 // when the book first knew it (Book.created)
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

// NewBook returns an empty book.
func NewBook() *Book {
	return &Book{procs: make(map[int]*procInfo), restarts: make(map[string]int), holders: make(map[rankSlot]*holding)}
}

// See records that pid is traced; gpu says it made a GPU call, reread that
// its environment may have changed (exec). It returns whether its
// environment is to be read now (it is new, or exec'd: see Unread), and
// whether this is the process's first GPU call. It reads nothing itself:
// it runs on the tracer's goroutine.
func (b *Book) See(pid int, gpu, reread bool) (read, firstGPU bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p != nil && !reread && (p.gpu || !gpu) {
		return false, false
	}
	read = p == nil || reread
	firstGPU = gpu && (p == nil || !p.gpu)
	if p == nil {
		p = b.newProc(pid)
	}
	if reread {
		// A new image: its part is decided again (see elect).
		p.role, p.helperOf = election.Candidate, 0
		p.unread, p.gen = true, p.gen+1
	}
	p.gpu = p.gpu || gpu
	return read, firstGPU
}

// Forked records that pid was forked by parent (a traced fork; parent 0
// for an exec, which changes nothing). The record is made here when pid is
// new, so that the ancestry holds even when the parent has exited by the
// time pid's /proc is read.
func (b *Book) Forked(pid, parent int) {
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
func (b *Book) newProc(pid int) *procInfo {
	b.created++
	p := &procInfo{pid: pid, id: identity.Identity{Rank: -1, LocalRank: -1}, seen: b.created, unread: true, commRank: -1}
	b.procs[pid] = p
	return p
}

// Look is a read of one process's /proc that the book asks for (Unread,
// Unsettled); the agent makes it off the tracer's goroutine and hands
// back what it read with Resolved.
type Look struct {
	PID   int
	Final bool   // the last look: a rank still without identity is numbered by order
	gen   uint64 // the image looked at: a look at an image since replaced is void
}

// Facts are what the agent read of a process for a Look.
type Facts struct {
	Env    map[string]string // its environment, nil with Err
	Err    error             // why the environment could not be read
	PPID   int               // its parent, 0 when unknown
	Python bool              // it runs a Python interpreter
}

// Unread lists the live processes whose environment is to be read (new,
// or exec'd since it was read).
func (b *Book) Unread() []Look {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Look
	for pid, p := range b.procs {
		if p.unread && !p.exited() {
			out = append(out, Look{PID: pid, gen: p.gen})
		}
	}
	slices.SortFunc(out, func(x, y Look) int { return int(b.procs[x.PID].seen - b.procs[y.PID].seen) })
	return out
}

// Resolved records one look at a process: its environment (or the error
// reading it), its parent and whether it runs Python. A process without
// an identity that is a rank is numbered by order of appearance when the
// look is final or the environment cannot be read. ok is false for a
// process unknown, gone, out of scope or exec'd since the look.
func (b *Book) Resolved(l Look, f Facts) (id identity.Identity, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[l.PID]
	if p == nil || p.exited() || p.role == election.Outside || p.gen != l.gen {
		return identity.Identity{}, false
	}
	p.idTries++
	p.unread = false
	p.python = f.Python
	switch {
	case p.forkedBy != 0:
		p.ppid = p.forkedBy // the parent at the fork: /proc names a reaper once it exits
	case f.PPID != 0:
		p.ppid = f.PPID
	}
	if f.Err == nil {
		if id := identity.Of(f.Env); id.FromEnv {
			p.id = id
		} else if p.id.Job == "" {
			p.id.Job, p.id.Incarnation = id.Job, id.Incarnation
		}
	}
	if !p.id.FromEnv && p.commRank >= 0 {
		b.fromComm(p, p.commRank, p.commWorld) // created before this first look
	}
	if !p.id.FromEnv && p.gpu && p.id.Rank < 0 && (l.Final || f.Err != nil) {
		b.assignOrder(p)
	}
	b.elect()
	b.incarnate(p)
	return p.id, true
}

// TakeWarm says, once per process, that a capture may read ahead for it:
// it made a GPU call and, looked at, is in scope.
func (b *Book) TakeWarm(pid int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p == nil || !p.gpu || p.unread || p.warmed || p.exited() || p.role == election.Outside {
		return false
	}
	p.warmed = true
	return true
}

// FromComm takes pid's identity from the first communicator it created
// (ncclCommInitRank's rank and size) when its environment named none; it
// says whether the identity changed.
func (b *Book) FromComm(pid, rank, world int) (identity.Identity, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p == nil || p.exited() {
		return identity.Identity{}, false
	}
	first := !p.comm
	p.comm = true
	if p.unread && first {
		// Its environment, read next, comes first.
		p.commRank, p.commWorld = rank, world
		b.elect()
		return p.id, false
	}
	changed := first && b.fromComm(p, rank, world)
	b.elect()
	if changed {
		b.incarnate(p)
	}
	return p.id, changed
}

// fromComm gives p, when its environment named no rank, the rank and size
// of its first communicator; b.mu held.
func (b *Book) fromComm(p *procInfo, rank, world int) bool {
	p.commRank = -1
	if p.id.FromEnv || rank < 0 || world <= rank {
		return false
	}
	p.id.Rank, p.id.World, p.id.LocalRank, p.id.Source = rank, world, -1, identity.SourceNCCL
	p.announced = false // announced again, with its real rank
	return true
}

// incarnate gives p, once its rank is known, the incarnation the book
// counts for its job when its environment gives none (see Book); b.mu
// held.
func (b *Book) incarnate(p *procInfo) {
	if p.exited() || p.id.Rank < 0 || !p.id.Known() {
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
func (b *Book) descends(p *procInfo, pid int) bool {
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
func (b *Book) assignOrder(p *procInfo) {
	p.id.Rank = b.order
	p.id.Source = identity.SourceOrder
	b.order++
}

// isRank says whether p is a live rank.
func (p *procInfo) isRank() bool { return p.role == election.Rank }

// elect gives every process its role (package election); a process that
// is not the rank is announced again should it be the rank after (it
// execs Python after its helper that ran Python, and was the rank
// meanwhile, exited: the last announcement of a rank names its process);
// b.mu held.
func (b *Book) elect() {
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
	if p.unread {
		// Not looked at yet (new, or exec'd): no sign of a rank known; a
		// candidate until the look (Resolved).
		return election.Process{PID: p.pid, Parent: p.ppid, Key: election.Key{Rank: -1}, Seen: p.seen, Exited: p.exited(), Role: role, Of: p.helperOf}
	}
	return election.Process{
		PID: p.pid, Parent: p.ppid,
		Key:   election.Key{Job: p.id.Job, Rank: p.id.Rank, World: p.id.World},
		Known: p.id.Known(), Env: p.id.FromEnv,
		GPU: p.gpu, Comm: p.comm, Python: p.python, Seen: p.seen,
		Exited: p.exited(), Role: role, Of: p.helperOf,
	}
}

// Helpers lists the live helpers of rank pid.
func (b *Book) Helpers(pid int) []int {
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

// Announcement is what the book tells of a rank it announces.
type Announcement struct {
	ID     identity.Identity
	GPU    bool // made GPU calls
	Python bool // runs Python
	PPID   int  // its parent (the forker, when the fork was traced), 0 when unknown
}

// Announce marks pid announced once its identity is settled; ok says it is
// to be announced now.
func (b *Book) Announce(pid int) (an Announcement, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p == nil || p.announced || !p.isRank() || p.id.Rank < 0 {
		return Announcement{}, false
	}
	p.announced = true
	return Announcement{ID: p.id, GPU: p.gpu, Python: p.python, PPID: p.ppid}, true
}

// Unsettled lists the looks again at the live ranks whose identity is not
// settled; after three looks a process without RANK is numbered by order
// (Look.Final).
func (b *Book) Unsettled() []Look {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Look
	for pid, p := range b.procs {
		if !p.exited() && p.role != election.Outside && (p.gpu || p.comm) && !p.id.FromEnv && p.id.Rank < 0 {
			out = append(out, Look{PID: pid, Final: p.idTries >= 2, gen: p.gen})
		}
	}
	return out
}

// Identity returns pid's identity once it is settled.
func (b *Book) Identity(pid int) (identity.Identity, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p == nil || (!p.id.FromEnv && p.id.Rank < 0) {
		return identity.Identity{}, false
	}
	return p.id, true
}

// Exit marks pid exited; ok is false when it was unknown or already gone,
// rank says it was a rank.
func (b *Book) Exit(pid int) (id identity.Identity, rank, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	if p == nil || p.exited() {
		return identity.Identity{}, false, false
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
func (b *Book) pruneHolders() {
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
// Exit first, sparing those a remembered process names as its parent (the
// ancestry of live processes through exited ones stays whole). An exited
// process is remembered a while so that a late event of its threads does
// not make it a rank again; a job that forks without end (a shell loop)
// keeps the record bounded; b.mu held.
func (b *Book) prune() {
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

// Gone says whether pid is unknown or exited.
func (b *Book) Gone(pid int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	return p == nil || p.exited()
}

// SetDumpStarted sets the dump-started flag of the ranks pids.
func (b *Book) SetDumpStarted(v bool, pids ...int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, pid := range pids {
		if p := b.procs[pid]; p != nil {
			p.dumpStarted = v
		}
	}
}

// SetDumpSeconds records how long pid's last dump took.
func (b *Book) SetDumpSeconds(pid int, secs float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if p := b.procs[pid]; p != nil {
		p.dumpSeconds = secs
	}
}

// Ranks lists the live rank processes (those with RANK or a GPU call), by
// rank then pid. Processes without RANK are numbered now if they are not
// yet, and given the world size of those numbered.
func (b *Book) Ranks() []Member {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []Member
	unknown := 0
	for _, p := range b.procs {
		if !p.isRank() {
			continue
		}
		if !p.id.Known() {
			unknown++
		}
		out = append(out, Member{PID: p.pid, ID: p.id, DumpStarted: p.dumpStarted, DumpSeconds: p.dumpSeconds})
	}
	for i := range out {
		m := &out[i]
		if !m.ID.Known() {
			if m.ID.Rank < 0 {
				p := b.procs[m.PID]
				b.assignOrder(p)
				m.ID.Rank, m.ID.Source = p.id.Rank, p.id.Source
			}
			m.ID.World = max(b.order, unknown)
		}
		if m.ID.World <= m.ID.Rank {
			m.ID.World = m.ID.Rank + 1
		}
	}
	slices.SortFunc(out, func(x, y Member) int {
		if x.ID.Rank != y.ID.Rank {
			return x.ID.Rank - y.ID.Rank
		}
		return x.PID - y.PID
	})
	return out
}

// Member is a live rank as Ranks lists it.
type Member struct {
	PID         int
	ID          identity.Identity
	DumpStarted bool    // a dump of it runs
	DumpSeconds float64 // how long its last dump took
}

// Live lists the live rank processes (those with RANK or a GPU call), as
// Ranks does, without numbering any.
func (b *Book) Live() []int {
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

// Exclude marks the process of a look out of scope (the Scope refused
// what the look read); ok is false when it is unknown, gone, or exec'd
// since the look.
func (b *Book) Exclude(l Look) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[l.PID]
	if p == nil || p.exited() || p.gen != l.gen {
		return false
	}
	p.unread = false
	p.role, p.helperOf = election.Outside, 0
	b.elect()
	return true
}

// Outside says whether pid is out of scope.
func (b *Book) Outside(pid int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[pid]
	return p != nil && p.role == election.Outside
}

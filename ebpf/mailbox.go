package ebpf

import (
	"sync"
	"sync/atomic"
)

// The reader hands the follower what following needs over a mailbox:
// process records (fork, exec, exit, a loader's change of libraries, each
// perhaps with the process held) in their order, and the kernel lookups'
// news. Posting never blocks the reader: the records go into a bounded
// queue; when it is full, and from then on until the follower has taken
// all, they are merged per process into a backlog (coalesced, counted),
// which the follower takes once the queue is empty, so that each
// process's records are handled in their order. The follower hands
// notices the other way, into a box the reader empties.

// procKind is what a process record says.
type procKind uint8

const (
	procFork procKind = iota + 1 // a followed process forked this one
	procExec                     // it called execve: a new image
	procExit                     // it exited
	procMmap                     // ld.so changed its libraries (a dlopen)
)

// procEvent is a process record as the follower needs it.
type procEvent struct {
	kind   procKind
	pid    int
	time   uint64 // bpf_ktime_get_ns of the record (a hold's start)
	held   bool   // the programs stopped the process until it is probed
	exited bool   // coalesced: it exited before kind (its pid reused)
}

// merge is what the follower must do for a process it was to handle e
// for, once next came too: an exit ends what came before; a fork or exec
// after an exit is a new process of the same pid (the exit first); a
// load after a fork or exec is covered by the scan those make.
func (e procEvent) merge(next procEvent) procEvent {
	held := e.held || next.held
	switch next.kind {
	case procExit:
		next.exited = false
	case procFork, procExec:
		next.exited = e.kind == procExit || e.exited
	case procMmap:
		switch e.kind {
		case procExit:
			next.exited = true
		default:
			next = e
		}
	}
	next.held = held
	return next
}

// inboxLen bounds the queue: more than the process ring buffer holds
// (procRingBytes: 3,600 records), so that only a follower stuck for a
// whole burst coalesces.
const inboxLen = 4096

// maxNotices bounds the notices waiting for the reader; beyond, they are
// dropped (as before the split).
const maxNotices = 4096

// mailbox carries records from the reader to the follower and notices
// back. Its lock is held only to move values in and out: neither side
// does any work under it.
type mailbox struct {
	queue     chan procEvent
	ready     chan struct{} // a value for the follower: backlog or news
	over      atomic.Bool   // records go to the backlog (reader's side)
	coalesced atomic.Uint64 // records merged into the backlog (Stats.Coalesced)
	drained   atomic.Bool   // the reader found the process ring buffer empty when last it looked

	mu      sync.Mutex
	backlog map[int]procEvent
	order   []int // pids of the backlog, first come first
	news    lookupNews
	newsAt  int64 // monotonic ns of the news, 0: none
	notices []Notice
	notify  func() // tells the reader that notices wait (set before Run)
}

func newMailbox() *mailbox {
	return &mailbox{queue: make(chan procEvent, inboxLen), ready: make(chan struct{}, 1)}
}

// post hands a record to the follower, from the reader; it never blocks.
func (m *mailbox) post(e procEvent) {
	if !m.over.Load() {
		select {
		case m.queue <- e:
			return
		default:
		}
	}
	m.mu.Lock()
	if m.backlog == nil {
		m.backlog = map[int]procEvent{}
	}
	if old, ok := m.backlog[e.pid]; ok {
		e = old.merge(e)
		m.coalesced.Add(1)
	} else {
		m.order = append(m.order, e.pid)
	}
	m.backlog[e.pid] = e
	m.over.Store(true)
	m.mu.Unlock()
	m.signal()
}

func (m *mailbox) signal() {
	select {
	case m.ready <- struct{}{}:
	default:
	}
}

// takeBacklog is the backlog, in the order its processes came, once the
// queue is empty (nil before: the queue's records come first); from then
// on the reader posts to the queue again. The follower's side.
func (m *mailbox) takeBacklog() []procEvent {
	if len(m.queue) > 0 || !m.over.Load() {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]procEvent, 0, len(m.order))
	for _, pid := range m.order {
		out = append(out, m.backlog[pid])
	}
	m.backlog, m.order = nil, nil
	m.over.Store(false)
	return out
}

// idle says whether the follower has taken every record posted.
func (m *mailbox) idle() bool { return len(m.queue) == 0 && !m.over.Load() }

// postNews hands the kernel lookups' news of a check at now (monotonic
// ns) to the follower, merged with news not yet taken; the follower is
// woken for a name learned or a handle never named, which may bring the
// lookups' probes back.
func (m *mailbox) postNews(n lookupNews, now int64) {
	m.mu.Lock()
	m.news.learned = m.news.learned || n.learned
	m.news.unnamed = m.news.unnamed || n.unnamed
	m.news.pending = n.pending
	m.newsAt = now
	m.mu.Unlock()
	if n.learned || n.unnamed {
		m.signal() // else the follower's next turn takes it (followIdle)
	}
}

// takeNews is the news posted since the last take, and when (0: none).
func (m *mailbox) takeNews() (lookupNews, int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, at := m.news, m.newsAt
	m.news, m.newsAt = lookupNews{}, 0
	return n, at
}

// notice hands a notice to the reader, from the follower (or a caller
// of Follow).
func (m *mailbox) notice(n Notice) {
	m.mu.Lock()
	if len(m.notices) < maxNotices {
		m.notices = append(m.notices, n)
	}
	notify := m.notify
	m.mu.Unlock()
	if notify != nil {
		notify()
	}
}

// takeNotices is the notices waiting, for the reader.
func (m *mailbox) takeNotices() []Notice {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.notices
	m.notices = nil
	return n
}

// hasNotices says whether notices wait.
func (m *mailbox) hasNotices() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.notices) > 0
}

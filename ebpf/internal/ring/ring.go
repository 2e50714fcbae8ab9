package ring

import (
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Record is one slot of a ring, the C struct call of probes.bpf.c seen as
// its sequence word, its time (bpf_ktime_get_ns) and the rest, which this
// package does not read: 64 bytes, one cache line.
type Record struct {
	Seq  uint64
	Time uint64
	Body [48]byte
}

// Size is the size of a Record and of a slot.
const Size = int(unsafe.Sizeof(Record{}))

// MaxRings bounds the call rings: CPU c writes into ring c % rings, rings
// being the CPUs (possible ones) up to MaxRings, rounded down to a power
// of two. A ring per CPU would make the map grow with the machine (352 KiB
// a CPU at the floor: 90 MiB on a 256-CPU node, charged to the agent's
// memory); sixteen keep it at the budget. CPUs that share a ring share its
// head, an atomic add on one cache line: a training node runs a handful of
// ranks, so two launching at once on CPUs of one ring is rare, and costs
// a cache miss.
const MaxRings = 16

// Count is how many call rings ncpu possible CPUs get.
func Count(ncpu int) int {
	n := 1
	for 2*n <= min(ncpu, MaxRings) {
		n *= 2
	}
	return n
}

// MinSlots is the floor of each call ring: 4096 records of 64 bytes, 256
// KiB. The default budget (8 MiB of slots) gives 2 rings (2 CPUs) 65536
// slots each, and 16 rings (16 CPUs or more) 8192 each. A ring holds what
// its CPUs write until the collector next drains it: 130 ms of one thread
// launching 500,000 times a second on 65536 slots, 16 ms on 8192. The
// collector drains a ring before it is an eighth full at the rate it
// fills (pace), and at rest a ring that fills a quarter wakes it.
const MinSlots = 4096

// DefaultBudget is the bytes of slots SlotsPerRing shares out when the
// budget is 0: 8 MiB.
const DefaultBudget = 8 << 20

// SlotsPerRing is how many slots each ring gets from a budget of bytes
// split over rings: the largest power of two whose slots fit, at least
// floor (MinSlots when 0). Each ring's header, one more slot, is beyond
// the budget: counted in it, the default budget lost half its slots to
// rounding (two rings of 32768 slots and their headers in 4 MiB and 128
// bytes, where 65536 slots each take 8 MiB).
func SlotsPerRing(budget, rings, floor int) int {
	if budget <= 0 {
		budget = DefaultBudget
	}
	if floor <= 0 {
		floor = MinSlots
	}
	n := floor
	for n < 1<<24 && 2*n*Size*rings <= budget {
		n *= 2
	}
	return n
}

// Bytes is the memory rings blocks of n slots take, headers included.
func Bytes(rings, n int) int { return rings * (n + 1) * Size }

// CollectInterval is how often the collector (Poll) copies the rings into
// memory while records come slowly, so that they do not overflow while
// the reader itself is busy; a shorter interval cost the launcher more
// CPU following the 8-rank testbed job. While they come
// fast, the collector drains sooner: before the fullest ring, at the rate
// it filled between the last two drains, is an eighth full
// (fillFraction), and at least every CollectInterval/16.
//
// After IdleDrains drains in a row found nothing, the collector, and the
// reader, look only every IdleInterval: at rest the launcher woke 100
// times a second for nothing. The programs wake the collector each time a
// ring's head passes a multiple of 1/WakeFraction of its slots, so a burst
// after a rest is read before it laps its ring however long the collector
// sleeps, at one wakeup per quarter ring. The first drains after a rest,
// the rate unknown, come at the fastest pace.
const (
	CollectInterval = 20 * time.Millisecond
	IdleInterval    = 200 * time.Millisecond
	IdleDrains      = 5
	WakeFraction    = 4
	fillFraction    = 8
)

// MaxPending bounds the records collected and not yet taken (16 MiB,
// twice what the default rings hold): beyond it, a stalled reader loses
// records, counted. At the start of a burst of launch-bound processes
// the reader can fall hundreds of milliseconds behind them (page faults
// and GC of the buffers growing, on the cores the processes keep busy):
// half this bound was once passed. A
// ring's pending records that grew beyond its ring's size are let go once
// all are taken.
const MaxPending = 1 << 18

// Rings reads rings blocks of n slots laid out in memory (see the package
// comment).
type Rings struct {
	mu      sync.Mutex
	mem     []byte // nil once closed
	unmap   func() error
	rings   int
	n       uint64 // slots per ring, a power of two
	tails   []uint64
	holes   [][]uint64 // per ring: positions below the tail still in flight
	lost    uint64
	quiet   int              // drains in a row that found nothing (idle: IdleDrains)
	fullest uint64           // the most new records the last drain found in a ring
	span    time.Duration    // since the drain before the last; 0 after a rest (the rate unknown)
	drained time.Time        // when the last drain began
	drains  uint64           // drains made
	now     func() time.Time // the clock of span (a test's own)

	// pending holds, per ring, the records collected, those from heads on
	// not yet taken, in time order: a ring's records come mostly in time
	// order already (a writer preempted between its reservation and its
	// clock read, or a hole read at a later drain, puts one a little out
	// of it), so each is put in place on arrival and Take merges the
	// rings. Sorting all of them at each take, records moved by a stable
	// sort, was the reader's largest cost at a million records a second.
	// The records taken stay until half of a ring's are, or all.
	pending  [][]Record
	heads    []int
	npending int // records not yet taken
}

// New reads rings blocks of n slots (a power of two) laid out in mem, at
// least Bytes(rings, n) long; unmap, if not nil, is called by Close.
func New(mem []byte, rings, n int, unmap func() error) *Rings {
	return &Rings{mem: mem, unmap: unmap, rings: rings, n: uint64(n), tails: make([]uint64, rings), holes: make([][]uint64, rings),
		pending: make([][]Record, rings), heads: make([]int, rings), now: time.Now}
}

// entry is the address of entry i of the memory (block headers included).
func (r *Rings) entry(i uint64) unsafe.Pointer {
	return unsafe.Pointer(&r.mem[i*uint64(Size)])
}

// head is how many records were ever reserved in ring i.
func (r *Rings) head(i int) uint64 {
	return atomic.LoadUint64((*uint64)(r.entry(uint64(i) * (r.n + 1))))
}

// slot states.
const (
	slotRead     = iota // copied whole
	slotInFlight        // reserved, not published yet
	slotLost            // overwritten before it was read
)

// read copies record pos of ring i into c; head is the ring's head as
// seen at the start of this drain.
func (r *Rings) read(i int, pos, head uint64, c *Record) int {
	p := r.entry(uint64(i)*(r.n+1) + 1 + pos&(r.n-1))
	seq := (*uint64)(p)
	s := atomic.LoadUint64(seq)
	switch {
	case s == pos+1:
	case s > pos+1 || head-pos > r.n:
		return slotLost // a later record has (or is reserved for) the slot
	default:
		return slotInFlight // 0 (being written) or an older record: not yet published
	}
	*c = *(*Record)(p)
	if atomic.LoadUint64(seq) != s {
		return slotLost // rewritten while copied
	}
	return slotRead
}

// Collect drains the rings into the pending records; beyond MaxPending
// of them, what it finds is lost. It says whether it found any after the
// rings were idle.
func (r *Rings) Collect() (woke bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	idle := r.restingLocked()
	r.drainLocked(func(ring int, c *Record) {
		if r.npending >= MaxPending {
			r.lost++
			return
		}
		r.npending++
		p := append(r.pending[ring], *c)
		for j, h := len(p)-1, r.heads[ring]; j > h && p[j-1].Time > p[j].Time; j-- {
			p[j-1], p[j] = p[j], p[j-1]
		}
		r.pending[ring] = p
	})
	return idle && r.quiet == 0
}

// Idle says whether the last drains found nothing: the collector then
// waits IdleInterval, or for a wakeup.
func (r *Rings) Idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restingLocked()
}

// restingLocked is Idle with r.mu held.
func (r *Rings) restingLocked() bool { return r.quiet >= IdleDrains }

// Drains is how many drains were made.
func (r *Rings) Drains() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.drains
}

// Take moves up to max pending records from before cut to dst, in time
// order (of two alike, the lower ring's first); the later ones stay
// pending. The caller collects first. A few at a time, the records are
// still in the cache when the caller reads them.
func (r *Rings) Take(cut uint64, dst []Record, max int) []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The rings with a record before cut, in ring order: on a node of many
	// CPUs most rings are idle, and each record would look at all of them.
	var buf [MaxRings]int
	act := buf[:0]
	for i, p := range r.pending {
		if h := r.heads[i]; h < len(p) && p[h].Time < cut {
			act = append(act, i)
		}
	}
	for n := 0; n < max && len(act) > 0; {
		if len(act) == 1 { // one ring: its run before cut, at once
			i := act[0]
			p, h := r.pending[i], r.heads[i]
			e := h
			for e < len(p) && e-h < max-n && p[e].Time < cut {
				e++
			}
			dst = append(dst, p[h:e]...)
			r.heads[i], r.npending = e, r.npending-(e-h)
			break
		}
		best, bt := 0, r.pending[act[0]][r.heads[act[0]]].Time
		for j := 1; j < len(act); j++ {
			if t := r.pending[act[j]][r.heads[act[j]]].Time; t < bt {
				best, bt = j, t
			}
		}
		i := act[best]
		dst = append(dst, r.pending[i][r.heads[i]])
		r.heads[i]++
		r.npending--
		n++
		if h := r.heads[i]; h == len(r.pending[i]) || r.pending[i][h].Time >= cut {
			act = append(act[:best], act[best+1:]...)
		}
	}
	for i, p := range r.pending {
		switch h := r.heads[i]; {
		case h == len(p) && cap(p) > int(r.n):
			r.pending[i], r.heads[i] = nil, 0 // a backlog's buffer, let go
		case h == len(p) || h > len(p)/2:
			r.pending[i] = p[:copy(p, p[h:])]
			r.heads[i] = 0
		}
	}
	return dst
}

// Pending is how many records were collected and not yet taken.
func (r *Rings) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.npending
}

// Waker is what the collector waits on at rest: the programs' wakeups.
type Waker interface {
	// Wait returns after a wakeup or d, having consumed the wakeups;
	// false when stop is closed or the wakeups are gone.
	Wait(d time.Duration, stop <-chan struct{}) bool
	// Consume takes the wakeups written so far (counted, so that their
	// buffer never fills); false once closed.
	Consume() bool
}

// Poll collects until stop, waiting pace between drains (while the rings
// are idle, IdleInterval or until w wakes it; nil: no wakeups). woke is
// called when a collect finds records after the rings were idle (the
// reader may then be in its long wait). The wakeups are waited for at
// rest only: parked on them under load, the collector cost the launcher
// more than on a timer, for the few wakeups a second it got.
func (r *Rings) Poll(stop <-chan struct{}, w Waker, woke func()) {
	tick := time.NewTimer(CollectInterval)
	defer tick.Stop()
	for {
		d := r.pace()
		if d == IdleInterval && w != nil {
			if !w.Wait(d, stop) {
				return
			}
		} else {
			tick.Reset(d)
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if w != nil {
				w.Consume()
			}
		}
		if r.Collect() && woke != nil {
			woke()
		}
	}
}

// pace is how long the collector waits for its next drain, from what the
// last drains found: IdleInterval after IdleDrains found nothing; else
// the time in which the fullest ring, at the rate it filled between the
// last two drains, fills 1/fillFraction of its slots, within
// CollectInterval/16 and CollectInterval (at once CollectInterval/16
// after a rest, when the rate is unknown: the wakeup that ended it says a
// ring is already a quarter full).
func (r *Rings) pace() time.Duration {
	const fastest = CollectInterval / 16
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.restingLocked():
		return IdleInterval
	case r.fullest == 0:
		return CollectInterval
	case r.span == 0:
		return fastest
	}
	d := r.span * time.Duration(r.n/fillFraction) / time.Duration(r.fullest)
	return min(max(d, fastest), CollectInterval)
}

// Drain appends every record published since the last drain to dst, in
// the order it read them (for tests and benchmarks: the reader collects
// and takes).
func (r *Rings) Drain(dst []Record) []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainLocked(func(_ int, c *Record) { dst = append(dst, *c) })
	return dst
}

// drainLocked hands every record published since the last drain to add,
// with its ring, ring by ring.
func (r *Rings) drainLocked(add func(ring int, c *Record)) {
	if r.mem == nil {
		return
	}
	found := false
	r.drains++
	r.fullest = 0
	now := r.now()
	r.span = now.Sub(r.drained)
	if r.restingLocked() {
		r.span = 0 // how fast records come again is not known yet
	}
	r.drained = now
	var c Record
	for i := range r.rings {
		head := r.head(i)
		holes := r.holes[i][:0]
		take := func(pos uint64) {
			switch r.read(i, pos, head, &c) {
			case slotRead:
				add(i, &c)
			case slotInFlight:
				holes = append(holes, pos)
			case slotLost:
				r.lost++
			}
		}
		for _, pos := range r.holes[i] {
			take(pos)
		}
		tail := r.tails[i]
		if head-tail > r.n {
			r.lost += head - r.n - tail
			tail = head - r.n
		}
		found = found || head > tail
		r.fullest = max(r.fullest, head-tail)
		for pos := tail; pos < head; pos++ {
			take(pos)
		}
		r.holes[i] = holes
		r.tails[i] = head
	}
	if found {
		r.quiet = 0
	} else if r.quiet < IdleDrains {
		r.quiet++
	}
}

// InFlight says whether the last drain left records reserved but not yet
// published.
func (r *Rings) InFlight() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.holes {
		if len(h) > 0 {
			return true
		}
	}
	return false
}

// Lost is how many records the reader missed, and will miss: those
// overwritten before it read them, counted at drains, those a full
// pending buffer turned away, and those already beyond a ring's size that
// no drain has counted yet (a reader that stopped reading still reports
// its losses).
func (r *Rings) Lost() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.lost
	if r.mem == nil {
		return n
	}
	for i := range r.rings {
		if d := r.head(i) - r.tails[i]; d > r.n {
			n += d - r.n
		}
	}
	return n
}

// Close lets the memory go (unmap); later drains find nothing.
func (r *Rings) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return nil
	}
	r.mem = nil
	if r.unmap != nil {
		return r.unmap()
	}
	return nil
}

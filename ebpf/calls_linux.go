//go:build linux && (386 || amd64)

package ebpf

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"
)

// callSize is the size of one call record and of one ring slot: 64 bytes,
// one cache line (probes.bpf.c, struct call).
const callSize = int(unsafe.Sizeof(probesCall{}))

// maxRings bounds the call rings: CPU c writes into ring c % rings, rings
// being the CPUs (possible ones) up to maxRings, rounded down to a power
// of two. A ring per CPU would make the map grow with the machine (352 KiB
// a CPU at the floor: 90 MiB on a 256-CPU node, charged to the agent's
// memory); sixteen keep it at the budget. CPUs that share a ring share its
// head, an atomic add on one cache line: a training node runs a handful of
// ranks, so two launching at once on CPUs of one ring is rare, and costs
// a cache miss.
const maxRings = 16

// ringCount is how many call rings ncpu possible CPUs get.
func ringCount(ncpu int) int {
	n := 1
	for 2*n <= min(ncpu, maxRings) {
		n *= 2
	}
	return n
}

// minSlotsPerRing is the floor of each call ring: 4096 records of 64
// bytes, 256 KiB. The default budget (8 MiB of slots) gives 2 rings (2
// CPUs) 65536 slots each, and 16 rings (16 CPUs or more) 8192 each. A ring
// holds what its CPUs write until the collector next drains it: 130 ms of
// one thread launching 500,000 times a second on 65536 slots, 16 ms on
// 8192. The collector drains a ring before it is an eighth full at the
// rate it fills (pace), and at rest a ring that fills a quarter wakes it.
const minSlotsPerRing = 4096

// collectInterval is how often a goroutine of Run's copies the call
// rings into memory while records come slowly, so that they do not
// overflow while Run itself is busy (a first launch of a process reads its
// symbols, which may take longer than a ring holds). At 5 ms, following
// the 8-rank testbed job cost the launcher 6.6-7.0 % of a core against
// 6.0-6.2 % at 20 ms (and 5.0-5.4 % with the BPF ring buffer, the same
// hour). While they come fast, the collector drains sooner: before the
// fullest ring, at the rate it filled between the last two drains, is
// an eighth full (fillFraction), and at least every collectInterval/16.
//
// After idleDrains drains in a row found nothing, the collector, and Run,
// look only every idleInterval: at rest the launcher woke 100 times a
// second for nothing (2 % of a core on the H100 host and on this
// project's VM). The programs wake the collector (the ring buffer wakes)
// each time a ring's head passes a multiple of 1/wakeFraction of its
// slots, so a burst after a rest is read before it laps its ring however
// long the collector sleeps, at one wakeup per quarter ring. The first
// drains after a rest, the rate unknown, come at the fastest pace.
const (
	collectInterval = pollInterval
	idleInterval    = 200 * time.Millisecond
	idleDrains      = 5
	wakeFraction    = 4
	fillFraction    = 8
)

// wakeRingBytes is the size of the ring buffer wakes: 256 wakeups (4
// bytes each behind an 8-byte header, padded to 16), far more than the
// collector leaves unread.
const wakeRingBytes = 4096

// maxPending bounds the records collected and not yet delivered (16 MiB,
// twice what the default rings hold): beyond it, a stalled Run loses
// records, counted. On the CI VM, at the start of a burst of 2 launch-bound
// processes on its 2 cores, Run fell 50-270 ms behind them (page faults
// and GC of the buffers growing, and the new ranks' read-ahead, all on the
// cores the processes kept busy): in 1 of 40 runs more than 131,072
// records waited, the bound before. A ring's pending records that grew
// beyond its ring's size are let go once all are taken.
const maxPending = 1 << 18

// procRingBytes is the size of the ring buffer of process records (the
// map procs): 3,600 records of 72 bytes with the ring's header, for the
// bursts of loader records of a Python import.
const procRingBytes = 256 << 10

// slotsPerRing is how many slots each call ring gets from a budget of
// bytes (Options.RingBufferBytes, default 8 MiB) split over rings: the
// largest power of two whose slots fit, at least minSlotsPerRing (or
// floor, where a test sets a smaller one). Each ring's header, one more
// slot, is beyond the budget: counted in it, the default budget lost half
// its slots to rounding (two rings of 32768 slots and their headers in
// 4 MiB and 128 bytes, where 65536 slots each take 8 MiB).
func slotsPerRing(budget, rings, floor int) int {
	if budget <= 0 {
		budget = DefaultRingBytes
	}
	if floor <= 0 {
		floor = minSlotsPerRing
	}
	n := floor
	for n < 1<<24 && 2*n*callSize*rings <= budget {
		n *= 2
	}
	return n
}

// sizeRings sizes the call rings and the process ring buffer of spec, an
// object of probes.bpf.c (today's, or an older one the benchmark runs),
// for this machine's possible CPUs and a budget of bytes (floor: see
// slotsPerRing), and returns how many rings of how many slots it made.
func sizeRings(spec *ebpf.CollectionSpec, budget, floor int) (rings, slots int, err error) {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return 0, 0, fmt.Errorf("count CPUs: %w", err)
	}
	rings = ringCount(ncpu)
	slots = slotsPerRing(budget, rings, floor)
	spec.Maps["calls"].MaxEntries = uint32(rings * (slots + 1))
	spec.Maps["procs"].MaxEntries = procRingBytes
	if w := spec.Maps["wakes"]; w != nil { // not in older objects (the benchmark's)
		w.MaxEntries = wakeRingBytes
		if err := spec.Variables["wake_mask"].Set(uint64(slots/wakeFraction - 1)); err != nil {
			return 0, 0, fmt.Errorf("size the call rings: %w", err)
		}
	}
	if err := spec.Variables["slot_mask"].Set(uint64(slots - 1)); err != nil {
		return 0, 0, fmt.Errorf("size the call rings: %w", err)
	}
	if err := spec.Variables["ring_mask"].Set(uint32(rings - 1)); err != nil {
		return 0, 0, fmt.Errorf("size the call rings: %w", err)
	}
	return rings, slots, nil
}

// callRings reads the call rings of the map calls (probes.bpf.c,
// reserve and publish) through a shared mapping, without system calls.
//
// Each ring's block is a header (its seq: the head, how many records were
// ever reserved there) and n slots; record pos lives in slot pos % n. A
// writer takes pos with a fetch-and-add on the head, marks the slot (seq
// 0), writes it and publishes it by storing seq = pos+1 last. The reader
// keeps, per ring, the position it has read up to (tail) and the positions
// below it that were reserved but not yet published when it looked (in
// flight: a writer preempted inside its program, or one on another CPU of
// the ring). A slot is read like a
// seqlock: seq, copy, seq again; a copy is good when both equal pos+1.
// Whatever the writers overwrote before it was read is counted lost.
//
// One case the seqlock cannot catch: a writer preempted inside its
// program for a whole lap of its ring (n records written there
// meanwhile) goes on writing into a slot that a later record owns, and
// may tear that record without changing its seq. The record it was
// writing is counted lost; the torn one is not detected.
type callRings struct {
	mu      sync.Mutex
	mem     []byte // nil once closed
	unmap   func() error
	rings   int
	n       uint64 // slots per ring, a power of two
	tails   []uint64
	holes   [][]uint64 // per ring: positions below the tail still in flight
	lost    uint64
	quiet   int              // drains in a row that found nothing (idle: idleDrains)
	fullest uint64           // the most new records the last drain found in a ring
	span    time.Duration    // since the drain before the last; 0 after a rest (the rate unknown)
	drained time.Time        // when the last drain began
	drains  uint64           // drains made
	now     func() time.Time // the clock of span (a test's own)

	// pending holds, per ring, the records collected, those from heads on
	// not yet taken, in time order: a ring's records come mostly in time
	// order already (a writer preempted between its reservation and its
	// clock read, or a hole read at a later drain, puts one a little out
	// of it), so each is put in place on arrival and take merges the
	// rings. Sorting all of them at each take, records moved by a
	// stable sort, was the reader's largest cost at a million records a
	// second. The records taken stay until half of a ring's are, or all.
	pending  [][]probesCall
	heads    []int
	npending int // records not yet taken
}

// mapCallRings maps the map calls of rings blocks of n slots.
func mapCallRings(m *ebpf.Map, rings, n int) (*callRings, error) {
	size := rings * (n + 1) * callSize
	page := os.Getpagesize()
	size = (size + page - 1) / page * page
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the call rings: %w", err)
	}
	r := newCallRings(mem, rings, n)
	r.unmap = func() error { return unix.Munmap(mem) }
	return r, nil
}

// newCallRings reads rings laid out in mem.
func newCallRings(mem []byte, rings, n int) *callRings {
	return &callRings{mem: mem, rings: rings, n: uint64(n), tails: make([]uint64, rings), holes: make([][]uint64, rings),
		pending: make([][]probesCall, rings), heads: make([]int, rings), now: time.Now}
}

// entry is the address of entry i of the map (block headers included).
func (r *callRings) entry(i uint64) unsafe.Pointer {
	return unsafe.Pointer(&r.mem[i*uint64(callSize)])
}

// head is how many records were ever reserved in ring i.
func (r *callRings) head(i int) uint64 {
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
func (r *callRings) read(i int, pos, head uint64, c *probesCall) int {
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
	*c = *(*probesCall)(p)
	if atomic.LoadUint64(seq) != s {
		return slotLost // rewritten while copied
	}
	return slotRead
}

// collect drains the rings into the pending records; beyond maxPending
// of them, what it finds is lost. It says whether it found any after the
// rings were idle.
func (r *callRings) collect() (woke bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	idle := r.restingLocked()
	r.drainLocked(func(ring int, c *probesCall) {
		if r.npending >= maxPending {
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

// idle says whether the last idleDrains drains found nothing.
func (r *callRings) idle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.restingLocked()
}

// restingLocked is idle with r.mu held.
func (r *callRings) restingLocked() bool { return r.quiet >= idleDrains }

// take moves up to max pending records from before cut to dst, in time
// order (of two alike, the lower ring's first); the later ones stay
// pending. The caller collects first. A few at a time, the records are
// still in the cache when the caller reads them.
func (r *callRings) take(cut uint64, dst []probesCall, max int) []probesCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	// The rings with a record before cut, in ring order: on a node of many
	// CPUs most rings are idle, and each record would look at all of them.
	var buf [maxRings]int
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

// poll collects until stop, waiting pace between drains (while the rings
// are idle, idleInterval or until w, the ring buffer wakes, wakes it; nil:
// none). woke is called when a collect finds records after the rings were
// idle (Run may then be in its long wait). The wakeups are waited for at
// rest only: parked on them under load, the collector cost the launcher
// 2-3 % of a core more at 550,000 launches a second on this project's VM
// than on a timer, for the 70 wakeups a second it got.
func (r *callRings) poll(stop <-chan struct{}, w *wakeWait, woke func()) {
	tick := time.NewTimer(collectInterval)
	defer tick.Stop()
	for {
		d := r.pace()
		if d == idleInterval && w != nil {
			if !w.wait(d, stop) {
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
				w.consume() // counted, and the buffer never fills
			}
		}
		if r.collect() && woke != nil {
			woke()
		}
	}
}

// pace is how long the collector waits for its next drain, from what the
// last drains found: idleInterval after idleDrains found nothing; else
// the time in which the fullest ring, at the rate it filled between the
// last two drains, fills 1/fillFraction of its slots, within
// collectInterval/16 and collectInterval (at once collectInterval/16
// after a rest, when the rate is unknown: the wakeup that ended it says a
// ring is already a quarter full).
func (r *callRings) pace() time.Duration {
	const fastest = collectInterval / 16
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.restingLocked():
		return idleInterval
	case r.fullest == 0:
		return collectInterval
	case r.span == 0:
		return fastest
	}
	d := r.span * time.Duration(r.n/fillFraction) / time.Duration(r.fullest)
	return min(max(d, fastest), collectInterval)
}

// wakeWait is the collector's wait on the ring buffer wakes: parked in
// Go's netpoller (readyWait) until the programs write a wakeup or the
// wait's end, after which it consumes what they wrote.
type wakeWait struct {
	rd    *ringbuf.Reader
	w     *readyWait
	rec   ringbuf.Record
	count atomic.Uint64 // wakeups consumed (Stats.Wakeups)

	mu     sync.Mutex // rd is not used once closed (its AvailableBytes would fault)
	closed bool
}

// newWakeWait waits on m, or is nil where the map cannot be read or
// polled (the collector then polls on its timer alone).
func newWakeWait(m *ebpf.Map) *wakeWait {
	if m == nil {
		return nil
	}
	w := newReadyWait(m)
	if w == nil {
		return nil
	}
	rd, err := ringbuf.NewReader(m)
	if err != nil {
		w.close()
		return nil
	}
	return &wakeWait{rd: rd, w: w}
}

// wait returns after a wakeup or d, having consumed the wakeups; false
// when stop is closed (then interrupt ends a wait under way) or the map
// is.
func (k *wakeWait) wait(d time.Duration, stop <-chan struct{}) bool {
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	k.w.wait(d, func() bool { return stopped() || k.available() != 0 })
	if stopped() {
		return false
	}
	return k.consume()
}

// available is how many bytes of wakeups wait; -1 once closed.
func (k *wakeWait) available() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return -1
	}
	return k.rd.AvailableBytes()
}

// consume reads the wakeups written so far (none: no system call); false
// once the map is closed.
func (k *wakeWait) consume() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return false
	}
	if k.rd.AvailableBytes() == 0 {
		return true
	}
	k.rd.SetDeadline(time.Now())
	for {
		err := k.rd.ReadInto(&k.rec)
		if err != nil {
			return !errors.Is(err, os.ErrClosed)
		}
		k.count.Add(1)
	}
}

// interrupt ends a wait under way: its stop is closed.
func (k *wakeWait) interrupt() { k.w.interrupt() }

// close marks the wait closed, then closes its descriptors: a wait under
// way (in readyWait, which the file's Close waits for) sees the mark and
// returns without the lock.
func (k *wakeWait) close() error {
	k.mu.Lock()
	k.closed = true
	k.mu.Unlock()
	return errors.Join(k.w.close(), k.rd.Close())
}

// drain appends every record published since the last drain to dst, in
// the order it read them.
func (r *callRings) drain(dst []probesCall) []probesCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drainLocked(func(_ int, c *probesCall) { dst = append(dst, *c) })
	return dst
}

// drainLocked hands every record published since the last drain to add,
// with its ring, ring by ring.
func (r *callRings) drainLocked(add func(ring int, c *probesCall)) {
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
	var c probesCall
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
	} else if r.quiet < idleDrains {
		r.quiet++
	}
}

// inFlight says whether the last drain left records reserved but not yet
// published.
func (r *callRings) inFlight() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range r.holes {
		if len(h) > 0 {
			return true
		}
	}
	return false
}

// lostCount is how many records the reader missed, and will miss: those
// overwritten before it read them, counted at drains, and those already
// beyond a ring's size that no drain has counted yet (a reader that stopped
// reading still reports its losses).
func (r *callRings) lostCount() uint64 {
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

// close unmaps the rings; later drains find nothing.
func (r *callRings) close() error {
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

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

	"github.com/xpu-timer/xpu-timer/ebpf/internal/ring"
)

// callSize is the size of one call record and of one ring slot: 64 bytes,
// one cache line (probes.bpf.c, struct call).
const callSize = int(unsafe.Sizeof(probesCall{}))

// A call record is a ring.Record: the same size, its sequence word and
// its time first (the build fails otherwise).
var (
	_ [callSize - ring.Size]struct{}
	_ [ring.Size - callSize]struct{}
	_ [unsafe.Offsetof(probesCall{}.Time) - unsafe.Offsetof(ring.Record{}.Time)]struct{}
	_ [unsafe.Offsetof(ring.Record{}.Time) - unsafe.Offsetof(probesCall{}.Time)]struct{}
	_ [unsafe.Offsetof(probesCall{}.Seq)]struct{}
)

// callsOf views ring records as the call records they are.
func callsOf(rs []ring.Record) []probesCall {
	return unsafe.Slice((*probesCall)(unsafe.Pointer(unsafe.SliceData(rs))), len(rs))
}

// wakeRingBytes is the size of the ring buffer wakes: 256 wakeups (4
// bytes each behind an 8-byte header, padded to 16), far more than the
// collector leaves unread.
const wakeRingBytes = 4096

// procRingBytes is the size of the ring buffer of process records (the
// map procs): 3,600 records of 72 bytes with the ring's header, for the
// bursts of loader records of a Python import.
const procRingBytes = 256 << 10

// sizeRings sizes the call rings and the process ring buffer of spec, an
// object of probes.bpf.c (today's, or an older one the benchmark runs),
// for this machine's possible CPUs and a budget of bytes (floor: see
// slotsPerRing), and returns how many rings of how many slots it made.
func sizeRings(spec *ebpf.CollectionSpec, budget, floor int) (rings, slots int, err error) {
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return 0, 0, fmt.Errorf("count CPUs: %w", err)
	}
	rings = ring.Count(ncpu)
	slots = ring.SlotsPerRing(budget, rings, floor)
	spec.Maps["calls"].MaxEntries = uint32(rings * (slots + 1))
	spec.Maps["procs"].MaxEntries = procRingBytes
	if w := spec.Maps["wakes"]; w != nil { // not in older objects (the benchmark's)
		w.MaxEntries = wakeRingBytes
		if err := spec.Variables["wake_mask"].Set(uint64(slots/ring.WakeFraction - 1)); err != nil {
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

// mapCallRings maps the map calls of rings blocks of n slots.
func mapCallRings(m *ebpf.Map, rings, n int) (*ring.Rings, error) {
	size := ring.Bytes(rings, n)
	page := os.Getpagesize()
	size = (size + page - 1) / page * page
	mem, err := unix.Mmap(m.FD(), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the call rings: %w", err)
	}
	return ring.New(mem, rings, n, func() error { return unix.Munmap(mem) }), nil
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

// Wait returns after a wakeup or d, having consumed the wakeups; false
// when stop is closed (then interrupt ends a wait under way) or the map
// is.
func (k *wakeWait) Wait(d time.Duration, stop <-chan struct{}) bool {
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
	return k.Consume()
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

// Consume reads the wakeups written so far (none: no system call); false
// once the map is closed.
func (k *wakeWait) Consume() bool {
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

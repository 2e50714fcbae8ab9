//go:build linux && (386 || amd64)

package ebpf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/xpu-timer/xpu-timer/ebpf/internal/ring"
	"github.com/xpu-timer/xpu-timer/internal/monoclock"
	"github.com/xpu-timer/xpu-timer/timer"
)

// pollInterval bounds how long a call record may wait in its ring while
// records come: the BPF side wakes the reader only each quarter ring, and
// only a resting one heeds it (reserve in probes.bpf.c, ring.Rings.Poll),
// so the reader looks on its own this often (ring.IdleInterval while the
// rings are idle), and before each process record.
const pollInterval = ring.CollectInterval

// inFlightWait bounds how long a process record waits for call records
// that were reserved but not yet published when it was read (a writer
// preempted inside its program), so that a process's calls come before
// its exit.
const inFlightWait = time.Millisecond

// deliverBatch is how many events the reader hands over at once: the
// receiver takes its locks once for so many, and they stay in the cache
// (13 KiB) between the decode and the handling.
const deliverBatch = 64

// reader reads what the programs write: the call rings and the process
// ring buffer, decoded into timer.Events, launches named (kernelNames)
// and split communicators identified (commIDs). It runs on Run's
// goroutine, with a collector goroutine that drains the call rings
// (ring.Rings.Poll). It never takes the follower's lock, never reads
// /proc to follow a process and never attaches: the process records go
// to the follower through the mailbox, which never blocks it.
type reader struct {
	rd       *ringbuf.Reader // process records (map procs)
	procWait *readyWait      // run waits for them here, or nil (see newReadyWait)
	rings    *ring.Rings     // call records (map calls)
	wakes    *wakeWait       // the collector waits for the programs here, or nil
	nudged   atomic.Bool     // the collector or the follower ended run's wait (nudge)
	quit     atomic.Bool     // Close began: run returns
	events   atomic.Uint64
	holds    *holds
	box      *mailbox

	// Run's goroutine only.
	calls     []ring.Record // records being delivered
	batch     []timer.Event // events being delivered (deliverBatch)
	names     *kernelNames
	comms     map[int]*commIDs
	learned   *ebpf.Map // the BPF side's count of names learned (lookups)
	noNames   bool      // Options.NoKernelNames
	lookNext  time.Time // when checkLookups looks next
	learnSeen uint64    // the map learned when last read
}

// run reads events until ctx is done or the ring buffer is closed (see
// Tracer.Run).
func (r *reader) run(ctx context.Context, onEvents func([]timer.Event), onNotice func(Notice)) error {
	stop, polled := make(chan struct{}), make(chan struct{})
	defer func() {
		close(stop)
		if r.wakes != nil {
			r.wakes.interrupt()
		}
		<-polled // the collector is done with the maps before run returns
	}()
	go func() {
		defer close(polled)
		var w ring.Waker
		if r.wakes != nil {
			w = r.wakes
		}
		r.rings.Poll(stop, w, r.nudge)
	}()
	var rec ringbuf.Record
	for {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r.quit.Load() {
			return nil
		}
		r.holds.beat()
		r.box.drained.Store(r.rd.AvailableBytes() == 0)
		r.housekeep(onNotice)
		if w := r.procWait; w != nil {
			// Parked in Go's netpoller until a record, a nudge or the
			// wait's end; then the reader only takes what is there.
			w.wait(r.wait(), func() bool { return r.nudged.Swap(false) || r.quit.Load() || r.rd.AvailableBytes() > 0 })
			r.rd.SetDeadline(time.Now())
		} else {
			r.rd.SetDeadline(time.Now().Add(r.wait()))
		}
		err := r.rd.ReadInto(&rec)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			now := monotonicNow()
			// A process record reserved before now (still being written,
			// or just committed) must go first, with the calls before it:
			// the next read takes it.
			if r.rd.AvailableBytes() == 0 {
				r.rings.Collect()
				r.deliverCalls(now, onEvents)
			}
			continue
		case errors.Is(err, ringbuf.ErrClosed):
			return nil
		case err != nil:
			return fmt.Errorf("read ring buffer: %w", err)
		}
		r.box.drained.Store(false)
		raw, ok := rawCall(rec.RawSample)
		if !ok {
			continue
		}
		deadline := time.Now().Add(inFlightWait)
		r.rings.Collect()
		for r.rings.InFlight() && time.Now().Before(deadline) {
			runtime.Gosched()
			r.rings.Collect()
		}
		r.deliverCalls(raw.Time, onEvents)
		r.processRecord(raw, onEvents)
	}
}

// monotonicNow is the clock of bpf_ktime_get_ns.
func monotonicNow() uint64 { return uint64(monoclock.Now()) }

// deliverCalls delivers, in time order, the collected call records from
// before cut (CLOCK_MONOTONIC ns, taken before the last collection); the
// later ones wait for the next.
func (r *reader) deliverCalls(cut uint64, onEvents func([]timer.Event)) {
	for {
		recs := r.rings.Take(cut, r.calls[:0], deliverBatch)
		r.calls = recs
		if len(recs) == 0 {
			return
		}
		calls := callsOf(recs)
		evs := r.batch[:len(calls)]
		for i := range evs {
			decode(&evs[i], &calls[i])
			r.complete(&evs[i], &calls[i])
		}
		r.events.Add(uint64(len(evs)))
		if onEvents != nil {
			onEvents(evs)
		}
	}
}

// wait is how long run may block for the next event.
func (r *reader) wait() time.Duration {
	if r.box.hasNotices() {
		return 0
	}
	if r.rings.Idle() {
		return ring.IdleInterval // the collector wakes run (nudge) when records come
	}
	return pollInterval
}

// nudge ends run's wait now: the collector found records after the rings
// were idle, while run may be in its long wait, or the follower has
// notices. The mark makes a wait that begins after the deadline was moved
// (and moves it back) end too.
func (r *reader) nudge() {
	if r.procWait != nil {
		r.nudged.Store(true)
		r.procWait.interrupt()
	}
}

// housekeep hands the lookups' news to the follower and the follower's
// notices out.
func (r *reader) housekeep(onNotice func(Notice)) {
	r.checkLookups(time.Now())
	pending := r.box.takeNotices()
	if onNotice != nil {
		for _, n := range pending {
			onNotice(n)
		}
	}
}

// processRecord hands a fork, exec, exit or mmap of a followed process
// to the follower, forgets what an exec or exit ends, and delivers it.
func (r *reader) processRecord(raw *probesCall, onEvents func([]timer.Event)) {
	pid := int(raw.Pid)
	ev := timer.Event{Time: int64(raw.Time), PID: pid, TID: pid}
	e := procEvent{pid: pid, time: raw.Time, held: raw.Phase == uint8(probesProcPhasePROC_HELD)}
	switch raw.Kind {
	case evFork:
		e.kind = procFork
		ev.Kind = timer.KindProcessExec
		ev.Parent = int(raw.Handle)
	case evExec:
		e.kind = procExec
		delete(r.comms, pid)
		r.names.forget(pid)
		ev.Kind = timer.KindProcessExec
	case evExit:
		e.kind = procExit
		delete(r.comms, pid)
		r.names.forget(pid)
		ev.Kind = timer.KindProcessExit
	case evMmap:
		e.kind = procMmap
		r.names.mapped(pid)
	}
	if e.kind != 0 || e.held {
		r.box.post(e)
	}
	if ev.Kind != timer.KindUnknown {
		r.events.Add(1)
		if onEvents != nil {
			r.batch[0] = ev
			onEvents(r.batch[:1])
		}
	}
}

// lost is how many records were dropped: call records overwritten before
// they were read, process records that found the ring buffer full (the
// map lost).
func (r *reader) lost(lost *ebpf.Map) uint64 {
	n := r.rings.Lost()
	var perCPU []uint64
	if err := lost.Lookup(uint32(0), &perCPU); err == nil {
		for _, v := range perCPU {
			n += v
		}
	}
	return n
}

// close closes what the reader reads.
func (r *reader) close() error {
	var errs []error
	if r.rd != nil {
		errs = append(errs, r.rd.Close())
	}
	if r.procWait != nil {
		errs = append(errs, r.procWait.close())
	}
	if r.wakes != nil {
		errs = append(errs, r.wakes.close())
	}
	if r.rings != nil {
		errs = append(errs, r.rings.Close())
	}
	return errors.Join(errs...)
}

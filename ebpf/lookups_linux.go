//go:build linux && (386 || amd64)

package ebpf

import (
	"time"

	"github.com/cilium/ebpf/link"
)

// lookupWindow is how long the kernel lookups' probes stay attached once
// nothing new comes (lookups.go): a training step's kernels all come in
// its first steps, and a kernel that comes later brings them back.
const lookupWindow = 2 * time.Second

// lookupEvery bounds how often checkLookups reads the BPF side's count of
// names learned (a system call).
const lookupEvery = 100 * time.Millisecond

// lookupNews tells the lookups that a library with the lookup was probed
// at now (monotonic ns): news that attaches them, as a launch of a handle
// never named does; t.mu held.
func (t *Tracer) lookupNews(now uint64) {
	t.setLookups(nextLookup(t.look, int64(now), lookupNews{unnamed: true}, int64(lookupWindow)))
}

// checkLookups steps the lookups (nextLookup) with what came since the
// last check: names the BPF side learned (the map learned), launches of
// handles never named (kernelNames); from Run's goroutine, t.mu held.
func (t *Tracer) checkLookups(now time.Time) {
	if now.Before(t.lookNext) || t.opts.NoKernelNames {
		return
	}
	t.lookNext = now.Add(lookupEvery)
	var n lookupNews
	var count uint64
	if err := t.objs.Learned.Lookup(uint32(0), &count); err == nil && count != t.learnSeen {
		t.learnSeen = count
		n.learned = true
		t.names.learned() // what named nothing is looked up again
	}
	mono := int64(monotonicNow())
	n.unnamed, n.pending = t.names.takeNews(mono)
	t.setLookups(nextLookup(t.look, mono, n, int64(lookupWindow)))
}

// setLookups takes the lookups' next state and, when their phase changes,
// attaches or detaches their probes in the background; t.mu held.
func (t *Tracer) setLookups(next lookupState) {
	changed := next.phase != t.look.phase
	t.look = next
	if !changed || t.closed {
		return
	}
	t.closing.Add(1)
	go func() {
		defer t.closing.Done()
		t.applyLookups()
	}()
}

// applyLookups brings every library's lookup probes to the lookups'
// phase: attached while learning, detached while quiet. The links are
// made and closed without t.mu, which Run takes; one apply at a time, each
// to the phase of its day.
func (t *Tracer) applyLookups() {
	t.lookMu.Lock()
	defer t.lookMu.Unlock()
	t.mu.Lock()
	want := t.look.phase == lookupLearning && !t.closed
	var todo []*library
	var gone []link.Link
	for _, l := range t.libs {
		switch {
		case want && l.lookups == nil && len(l.lookup) > 0:
			todo = append(todo, l)
		case !want && l.lookups != nil:
			gone = append(gone, l.lookups...)
			l.lookups, l.lookupProbes = nil, 0
		}
	}
	if !want {
		t.names.since.Store(0) // pending handles wait for the probes' return
	}
	t.mu.Unlock()
	closeLinks(gone)
	for _, l := range todo {
		lk := &library{}
		ex, err := link.OpenExecutable(l.file)
		if err == nil {
			_, _, err = t.attachSet(lk, ex, l.lookup, l.syms)
		}
		t.mu.Lock()
		if err != nil {
			// The file is gone or cannot take them: launches of its new
			// kernels keep their handles.
			t.notice(Notice{Kind: NoticeError, Library: l.path, Err: err})
		}
		keep := err == nil && t.look.phase == lookupLearning && !t.closed && t.libs[l.key] == l && l.lookups == nil
		if keep {
			l.lookups, l.lookupProbes = lk.links, lk.probes
			t.names.since.Store(int64(monotonicNow()))
		}
		t.mu.Unlock()
		if !keep {
			closeLinks(lk.links)
		}
	}
}

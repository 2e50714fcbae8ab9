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
// never named does; f.mu held.
func (f *follower) lookupNews(now uint64) {
	f.setLookups(nextLookup(f.look, int64(now), lookupNews{unnamed: true}, int64(lookupWindow)))
}

// checkLookups hands the follower, at most every lookupEvery, what came
// since the last check: names the BPF side learned (the map learned),
// launches of handles never named (kernelNames); the follower steps the
// lookups with it (nextLookup). From Run's goroutine.
func (r *reader) checkLookups(now time.Time) {
	if now.Before(r.lookNext) || r.noNames {
		return
	}
	r.lookNext = now.Add(lookupEvery)
	var n lookupNews
	var count uint64
	if err := r.learned.Lookup(uint32(0), &count); err == nil && count != r.learnSeen {
		r.learnSeen = count
		n.learned = true
		r.names.learned() // what named nothing is looked up again
	}
	mono := int64(monotonicNow())
	n.unnamed, n.pending = r.names.takeNews(mono)
	r.box.postNews(n, mono)
}

// setLookups takes the lookups' next state and, when their phase changes,
// attaches or detaches their probes in the background; f.mu held.
func (f *follower) setLookups(next lookupState) {
	changed := next.phase != f.look.phase
	f.look = next
	if !changed || f.closed {
		return
	}
	f.closing.Add(1)
	go func() {
		defer f.closing.Done()
		f.applyLookups()
	}()
}

// applyLookups brings every library's lookup probes to the lookups'
// phase: attached while learning, detached while quiet. The links are
// made and closed without f.mu, which the follower's goroutine and Follow
// take; one apply at a time, each to the phase of its day.
func (f *follower) applyLookups() {
	f.lookMu.Lock()
	defer f.lookMu.Unlock()
	f.mu.Lock()
	want := f.look.phase == lookupLearning && !f.closed
	var todo []*library
	var gone []link.Link
	for _, l := range f.libs {
		switch {
		case want && l.lookups == nil && len(l.lookup) > 0:
			todo = append(todo, l)
		case !want && l.lookups != nil:
			gone = append(gone, l.lookups...)
			l.lookups, l.lookupProbes = nil, 0
		}
	}
	if !want {
		f.since.Store(0) // pending handles wait for the probes' return
	}
	f.mu.Unlock()
	closeLinks(gone)
	for _, l := range todo {
		lk := &library{}
		ex, err := link.OpenExecutable(l.file)
		if err == nil {
			_, _, err = f.attachSet(lk, ex, l.lookup, l.syms)
		}
		f.mu.Lock()
		if err != nil {
			// The file is gone or cannot take them: launches of its new
			// kernels keep their handles.
			f.notice(Notice{Kind: NoticeError, Library: l.path, Err: err})
		}
		keep := err == nil && f.look.phase == lookupLearning && !f.closed && f.libs[l.key] == l && l.lookups == nil
		if keep {
			l.lookups, l.lookupProbes = lk.links, lk.probes
			f.since.Store(int64(monotonicNow()))
		}
		f.mu.Unlock()
		if !keep {
			closeLinks(lk.links)
		}
	}
}

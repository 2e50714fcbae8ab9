//go:build linux && (386 || amd64)

package ebpf

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// rescanDelay is how long after a fork or exec a process's maps are read
// once more, after the scan made at once: a safety net for what the first
// read might have missed.
const rescanDelay = 20 * time.Millisecond

// maxScanLag bounds how long a process that mapped code waits for its scan
// while records keep coming: scans wait for the records before them to be
// handled, so that a burst of mmaps (a Python import) costs one read of
// the maps.
const maxScanLag = 2 * time.Millisecond

// followIdle is how often the follower looks, with nothing to do, for
// libraries to detach and holds whose record never came.
const followIdle = 200 * time.Millisecond

// follower follows processes: which are followed and what they map, the
// reads of their maps and libraries (scans), the probes attached to the
// libraries, the holds and the kernel lookups' probes. It works on its
// own goroutine (run, for the time of Run), fed by the reader's mailbox,
// and on the goroutines that call Follow, Stats and Probed; all of it
// under f.mu, which the reader never takes.
type follower struct {
	opts     *Options
	progs    map[string]*ebpf.Program
	multi    bool // attach with uprobe_multi links (Linux 6.6+)
	followed *followedSet
	holds    *holds
	box      *mailbox
	since    *atomic.Int64  // when the lookups' probes came (kernelNames.since)
	closing  sync.WaitGroup // links detaching in the background

	// onLoader, when set before Run, is called with f.mu held for each
	// loader record (ld.so's r_brk) of a followed process, with its BPF
	// time (CLOCK_MONOTONIC ns), on the follower's goroutine: for
	// benchmarks of the attach latency, and tests of a stuck follower.
	onLoader func(pid int, ktime uint64)

	mu      sync.Mutex
	procs   map[int]*process
	libs    map[libKey]*library
	scanned map[libKey]map[string]uint64 // exported probe symbols (file offsets) by file
	dirty   map[int]time.Time            // processes whose maps to read again, and when
	closed  bool
	look    lookupState   // the kernel lookups' probes (lookups.go)
	nholds  uint64        // Stats.Holds
	held    time.Duration // Stats.Held

	lookMu    sync.Mutex // one applyLookups at a time
	lastStale time.Time  // the last look for stale holds; run's goroutine
}

// process is a followed process and the libraries it holds.
type process struct {
	pid      int
	libs     map[libKey]bool
	complete bool // a driver and a collective library probed: no more holds
}

func newFollower(opts *Options, progs map[string]*ebpf.Program, multi bool, followed *followedSet, h *holds, box *mailbox, since *atomic.Int64) *follower {
	return &follower{
		opts: opts, progs: progs, multi: multi, followed: followed, holds: h, box: box, since: since,
		procs:   map[int]*process{},
		libs:    map[libKey]*library{},
		scanned: map[libKey]map[string]uint64{},
		dirty:   map[int]time.Time{},
	}
}

// follow traces pid and all its descendants, present and future. The
// libraries it has mapped are probed before it returns.
func (f *follower) follow(pid int) error {
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
		return fmt.Errorf("follow %d: %w", pid, err)
	}
	// Into the BPF map first: a fork from now on is followed by the kernel,
	// and the walk of /proc below finds the children forked before.
	if interactiveChild(pid) {
		f.holds.exempt(pid, probesUnheldWhyUNHELD_INTERACTIVE)
	}
	if err := f.followPID(pid); err != nil {
		return err
	}
	pids := append([]int{pid}, descendants(pid)...)
	for _, p := range pids[1:] {
		if interactiveChild(p) {
			f.holds.exempt(p, probesUnheldWhyUNHELD_INTERACTIVE)
		}
		if err := f.followPID(p); err != nil {
			return err
		}
	}
	for _, p := range pids {
		f.prescan(p)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range pids {
		f.addProcess(p)
		f.scan(p)
	}
	return nil
}

// prescan reads, without f.mu, the probe symbols of the libraries pid
// maps that no scan has read, for the scan under f.mu to find: reading a
// large library's symbol tables (libtorch_cuda's) takes up to a second or
// more, during which the follower's goroutine, and Stats, would wait for
// f.mu. What fails here the scan reads again, and reports.
func (f *follower) prescan(pid int) {
	libs, err := execMappings(pid)
	if err != nil {
		return
	}
	for _, m := range libs {
		f.mu.Lock()
		_, done := f.scanned[m.Key]
		f.mu.Unlock()
		if done || !f.opts.wanted(m.Path) {
			continue
		}
		syms, err := exportedProbeSymbols(procPath(pid, m.Path))
		if err != nil {
			continue
		}
		f.mu.Lock()
		if _, done := f.scanned[m.Key]; !done {
			f.scanned[m.Key] = syms
		}
		f.mu.Unlock()
	}
}

func (f *follower) followPID(pid int) error {
	if err := f.followed.add(pid); err != nil {
		return fmt.Errorf("follow %d: %w", pid, err)
	}
	return nil
}

// addProcess registers a followed process; f.mu held.
func (f *follower) addProcess(pid int) *process {
	p := f.procs[pid]
	if p == nil {
		p = &process{pid: pid, libs: map[libKey]bool{}}
		f.procs[pid] = p
	}
	return p
}

// removeProcess releases everything a process held; f.mu held.
func (f *follower) removeProcess(pid int) {
	p := f.procs[pid]
	if p == nil {
		return
	}
	for k := range p.libs {
		f.release(k)
	}
	delete(f.procs, pid)
	delete(f.dirty, pid)
	f.followed.remove(pid)
	f.holds.unexempt(pid)
}

// maxScanPasses bounds the reads of one scan (see scan).
const maxScanPasses = 3

// scan reads the maps of a followed process and probes the libraries it
// has not been probed for; f.mu held.
//
// The loader probe reports a process's library changes from the moment
// it is attached, not before: a library the process loads between the
// read of its maps and the attach of the loader probe that read found
// (a C program that dlopens the driver at its start, or is linked to it
// and is followed while ld.so maps it) would be seen by neither. So a
// scan that attaches a loader probe reads the maps again once it is in
// place: what was loaded before is in that read, what is loaded after
// fires the probe.
func (f *follower) scan(pid int) {
	for range maxScanPasses {
		if !f.scanOnce(pid) {
			break
		}
	}
	if p := f.procs[pid]; p != nil && !p.complete && f.probedAll(p) {
		p.complete = true
		f.holds.exempt(pid, probesUnheldWhyUNHELD_COMPLETE)
	}
}

// scanOnce is one read of pid's maps and the probes it takes; it says
// whether it attached a loader probe, so that the maps are to be read
// again; f.mu held.
func (f *follower) scanOnce(pid int) (again bool) {
	p := f.procs[pid]
	if p == nil {
		return false
	}
	libs, err := execMappings(pid)
	if err != nil {
		return false // exited: its exit event releases it
	}
	// The GPU libraries, then the collective ones, then the rest
	// (attachRank).
	sort.SliceStable(libs, func(i, j int) bool { return attachRank(libs[i].Path) < attachRank(libs[j].Path) })
	for _, m := range libs {
		if p.libs[m.Key] {
			continue
		}
		syms, ok := f.scanned[m.Key]
		if !ok {
			syms = map[string]uint64{}
			if f.opts.wanted(m.Path) {
				s, err := exportedProbeSymbols(procPath(pid, m.Path))
				if gone(err) {
					return false // it exited (or exec'd) meanwhile: nothing to say, and nothing learnt of the file
				}
				if err != nil {
					f.notice(Notice{Kind: NoticeError, PID: pid, Library: m.Path, Err: err})
				} else {
					syms = s
				}
			}
			f.scanned[m.Key] = syms
		}
		if len(syms) == 0 {
			continue
		}
		attached, err := f.acquire(pid, m, syms)
		if err != nil {
			if !gone(err) {
				f.notice(Notice{Kind: NoticeError, PID: pid, Library: m.Path, Err: err})
			}
			continue
		}
		p.libs[m.Key] = true
		if _, ld := syms[loaderProbe.Symbol]; ld && attached {
			again = true
		}
	}
	return again
}

// gone says whether err comes from a process that exited or exec'd while
// its files were read through /proc/PID/root: a race with the job's own
// life, not a problem to report.
func gone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ESRCH)
}

// procPath is a file of a process as seen from here (it may live in
// another mount namespace).
func procPath(pid int, path string) string {
	return fmt.Sprintf("/proc/%d/root%s", pid, path)
}

// notice hands n to the reader, which hands it on.
func (f *follower) notice(n Notice) {
	n.Time = time.Now()
	f.box.notice(n)
}

// run follows until stop is closed: the records the reader posts, in
// their order, then the scans due, the libraries to detach, the lookups'
// steps and the stale holds (housekeep). What was posted before stop is
// handled before it returns, so that a next Run starts from what the
// processes did.
func (f *follower) run(stop <-chan struct{}) {
	tick := time.NewTimer(followIdle)
	defer tick.Stop()
	for {
		f.holds.turned()
		select {
		case <-stop:
			f.takeAll()
			return
		case e := <-f.box.queue:
			f.handle(e)
			f.takeAll()
		case <-f.box.ready:
			f.takeAll()
		case <-tick.C:
		}
		tick.Reset(f.housekeep())
	}
}

// takeAll handles every record posted so far: the queue's, then the
// backlog's.
func (f *follower) takeAll() {
	for {
		select {
		case e := <-f.box.queue:
			f.handle(e)
			continue
		default:
		}
		b := f.box.takeBacklog()
		if len(b) == 0 {
			return
		}
		for _, e := range b {
			f.handle(e)
		}
	}
}

// handle follows a process record: a fork or exec is scanned at once and
// again rescanDelay later, an exit releases what the process held, a
// loader's change is scanned now if the process is held, else as soon as
// the records before it are handled. A held process then goes on.
func (f *follower) handle(e procEvent) {
	f.holds.turned()
	if !e.exited && (e.kind == procExec || e.kind == procMmap && e.held) {
		// A new image's or library's symbol tables read before the lock
		// (as Follow does): the scan under it finds them read, and Stats,
		// Probed and Close do not wait behind a large library. Only
		// where handle scans at once: a fork maps its parent's files,
		// read at the parent's scan, and a load not held is scanned
		// later, at its rescan.
		f.prescan(e.pid)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return // Close resumed every held process
	}
	pid := e.pid
	if e.exited {
		f.removeProcess(pid)
		f.notice(Notice{Kind: NoticeExit, PID: pid})
	}
	switch e.kind {
	case procFork:
		f.addProcess(pid)
		f.scan(pid)
		f.dirty[pid] = time.Now().Add(rescanDelay)
		f.notice(Notice{Kind: NoticeExec, PID: pid})
	case procExec:
		// A new image: what the old one mapped is gone. The new image's
		// libraries are taken before the old ones are released, so a
		// library both map (ld.so, or all of them when this record is read
		// after the process has loaded more) keeps its probes.
		p := f.addProcess(pid)
		old := p.libs
		p.libs = map[libKey]bool{}
		p.complete = false // the exec program took it out of unheld
		f.scan(pid)
		for k := range old {
			f.release(k)
		}
		f.dirty[pid] = time.Now().Add(rescanDelay)
		f.notice(Notice{Kind: NoticeExec, PID: pid})
	case procExit:
		f.removeProcess(pid)
		f.notice(Notice{Kind: NoticeExit, PID: pid})
	case procMmap:
		if e.held && f.procs[pid] != nil {
			delete(f.dirty, pid)
			f.scan(pid)
		} else if due, ok := f.dirty[pid]; f.procs[pid] != nil && (!ok || due.After(time.Now())) {
			f.dirty[pid] = time.Now()
		}
		if f.onLoader != nil {
			f.onLoader(pid, e.time)
		}
	}
	if e.held {
		// Its new code is probed (exec and loader records, above): it goes
		// on.
		if err := f.holds.resume(pid); err != nil {
			f.notice(Notice{Kind: NoticeError, PID: pid, Err: err})
		}
		f.nholds++
		f.held += time.Duration(monotonicNow() - e.time)
	}
}

// housekeep scans the processes that mapped code once the records before
// are handled (or maxScanLag passed), detaches the libraries nobody maps
// any more, steps the lookups with the reader's news and resumes holds
// whose record never came; it says how long the follower may wait.
func (f *follower) housekeep() time.Duration {
	now := time.Now()
	drained := f.box.idle() && f.box.drained.Load()
	wait := followIdle
	f.mu.Lock()
	f.expire(now)
	var due []int
	for pid, at := range f.dirty {
		lag := now.Sub(at)
		if lag >= 0 && (drained || lag >= maxScanLag) {
			due = append(due, pid)
			continue
		}
		wait = min(wait, max(-lag, maxScanLag/4))
	}
	if len(due) > 0 {
		// Their new libraries' symbol tables read without f.mu, as handle
		// reads them: Stats, Probed and Close do not wait behind them.
		// Only this goroutine writes f.dirty.
		f.mu.Unlock()
		for _, pid := range due {
			f.prescan(pid)
		}
		f.mu.Lock()
		for _, pid := range due {
			delete(f.dirty, pid)
			if !f.closed {
				f.scan(pid)
			}
		}
	}
	if n, at := f.box.takeNews(); at != 0 {
		f.setLookups(nextLookup(f.look, at, n, int64(lookupWindow)))
	}
	f.mu.Unlock()
	if drained && now.Sub(f.lastStale) >= beatEvery {
		// A hold's record is reserved before the stop and submitted right
		// after, and the follower resumes the process once it handled it:
		// a hold older than staleHold, with no record left to read or to
		// handle, lost its record. One whose record waits behind a long
		// scan is left to it.
		f.lastStale = now
		f.holds.resumeHeld(monotonicNow() - uint64(staleHold))
	}
	return wait
}

// stats fills what the follower knows of s.
func (f *follower) stats(s *Stats) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s.Processes = len(f.procs)
	s.Holds, s.Held = f.nholds, f.held
	for _, l := range f.libs {
		if l.refs > 0 {
			s.Probes += l.probes + l.lookupProbes
		} else {
			s.Idle += l.probes + l.lookupProbes
		}
		s.LookupProbes += l.lookupProbes
	}
}

// probed reports whether pid maps a library whose GPU calls are probed.
func (f *follower) probed(pid int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p := f.procs[pid]; p != nil {
		for k := range p.libs {
			if l := f.libs[k]; l != nil && l.gpu {
				return true
			}
		}
	}
	return false
}

// close forgets every process and detaches every library, in the
// background (Close waits for them, bounded); false if it was closed.
func (f *follower) close() bool {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return false
	}
	f.closed = true
	var links []link.Link
	for k, l := range f.libs {
		links = append(links, l.allLinks()...)
		l.links, l.lookups = nil, nil
		delete(f.libs, k)
	}
	f.procs = map[int]*process{}
	f.mu.Unlock()
	f.detach(links)
	return true
}

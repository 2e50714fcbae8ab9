package agent

import (
	"github.com/xpu-timer/xpu-timer/agent/identity"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"

	"bytes"
	"context"
	"os"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/dump"
	"github.com/xpu-timer/xpu-timer/collector/capture/flight"
	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/timeline"
	"github.com/xpu-timer/xpu-timer/timer"
)

// dumpHangs dumps, for new decisions, the hung ranks and every other rank
// of their jobs on the node, each once per episode (a rank dumped as a peer
// that hangs later gets its file rewritten with its decision, without a
// second stop), writes the marker and, with HangKill, ends the hung
// process groups.
func (a *Agent) dumpHangs(ctx context.Context, hangs []timer.Hang) {
	// Captures bound their stops (well under a second each); dumps still
	// running after slowDump are stuck somewhere they should not be: say
	// where.
	slow := time.AfterFunc(slowDump, func() {
		var b bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&b, 1)
		a.log.Warn("dumps still running", "after", slowDump, "goroutines", b.String())
	})
	defer slow.Stop()
	hung := make(map[int]timer.Hang, len(hangs))
	for _, h := range hangs {
		hung[h.PID] = h
	}
	ranks := a.ranks()
	jobs := map[string]bool{}
	for _, p := range ranks {
		if _, ok := hung[p.pid]; ok {
			jobs[p.id.Job] = true
		}
	}
	var todo []procInfo
	var rewrite []*dumped
	a.mu.Lock()
	for _, p := range ranks {
		if !jobs[p.id.Job] {
			continue
		}
		d := a.episode[p.pid]
		if d == nil {
			todo = append(todo, p)
			continue
		}
		if h, ok := hung[p.pid]; ok && d.file.Hang == nil {
			d.file.Hang, d.file.Reason = dump.Decision(&h), dumpfile.ReasonHang
			rewrite = append(rewrite, d)
		}
	}
	a.mu.Unlock()
	for _, d := range rewrite {
		if path, err := a.writeDump(d.file); err != nil {
			a.log.Error("rewrite dump", "rank", d.file.Rank, "err", err)
		} else {
			a.log.Info("dump rewritten with the rank's own decision", "rank", d.file.Rank, "pid", d.file.PID, "path", path)
		}
	}
	start := time.Now()
	n := a.dumpRanks(ctx, todo, func(pid int) (dumpfile.Reason, *timer.Hang) {
		if h, ok := hung[pid]; ok {
			return dumpfile.ReasonHang, &h
		}
		if h, ok := a.engine.Hung(pid); ok {
			return dumpfile.ReasonHang, &h
		}
		return dumpfile.ReasonPeer, nil
	})
	if len(todo) > 0 {
		a.log.Info("dumped ranks", "ranks", n, "of", len(todo), "seconds", time.Since(start).Seconds(), "path", a.o.TimelinePath)
		a.writeMarker(hangs)
	}
	if a.o.HangKill {
		for _, h := range hangs {
			a.kill(h.PID)
		}
	}
}

// slowDump is how long the dumps of a decision may run before they are
// reported stuck, with where the monitor's goroutines are.
const slowDump = 10 * time.Second

// dumpRanks captures and writes ranks in parallel (at most Parallel at
// once) and returns how many were written.
func (a *Agent) dumpRanks(ctx context.Context, ranks []procInfo, why func(pid int) (dumpfile.Reason, *timer.Hang)) int {
	if len(ranks) == 0 {
		return 0
	}
	if err := os.MkdirAll(a.o.TimelinePath, 0o755); err != nil {
		a.mu.Lock()
		a.failures += uint64(len(ranks))
		a.mu.Unlock()
		a.log.Error("cannot create timeline path; dumps skipped", "path", a.o.TimelinePath, "err", err)
		a.report(Report{Event: EventDumpFailed, Path: a.o.TimelinePath, Error: err.Error()})
		return 0
	}
	pids := make([]int, len(ranks))
	for i, p := range ranks {
		pids[i] = p.pid
	}
	a.book.setDumpStarted(true, pids...)
	a.kick()
	sem := make(chan struct{}, a.o.Parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	written := 0
	for _, p := range ranks {
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			reason, h := why(p.pid)
			if a.dumpOne(p, reason, h) {
				mu.Lock()
				written++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	a.kick()
	a.retainSoon()
	return written
}

// dumpHelper captures a helper process of a rank, for the rank's dump.
func (a *Agent) dumpHelper(pid int) dumpfile.Helper {
	c, err := a.o.Capturer.Capture(pid)
	g := identity.File(pid, Identity{}, Labels{}, c, err)
	return dumpfile.Helper{PID: pid, Cmdline: g.Cmdline, State: g.State, Threads: g.Threads, Errors: g.Errors}
}

// dumpOne captures one rank and writes its .stacktrace (with .txt) and its
// flight recorder trace.
func (a *Agent) dumpOne(p procInfo, reason dumpfile.Reason, h *timer.Hang) bool {
	start := time.Now()
	comms := a.engine.Comms(p.pid)
	c, err := a.o.Capturer.Capture(p.pid)
	f := identity.File(p.pid, p.id, Labels{Host: a.o.Hostname, IP: a.o.IP, JobName: a.o.JobName, PodName: a.o.PodName}, c, err)
	f.Reason, f.Hang, f.Comms = reason, dump.Decision(h), dump.Comms(comms)
	f.Job, f.Incarnation = p.id.Job, max(p.id.Incarnation, 0)
	for _, pid := range a.book.helpers(p.pid) {
		f.Helpers = append(f.Helpers, a.dumpHelper(pid))
	}
	if a.o.GPU != nil {
		f.GPU = a.o.GPU.GPU(f.LocalRank)
	}
	f.DumpedAt = a.o.Now()
	f.DumpDuration = time.Since(start)
	path, werr := a.writeDump(f)
	a.writeTrace(p, f)
	secs := time.Since(start).Seconds()
	a.book.setDumpSeconds(p.pid, secs)
	a.mu.Lock()
	if werr != nil {
		a.failures++
	} else {
		a.dumps++
		a.episode[p.pid] = &dumped{file: f, path: path}
	}
	a.mu.Unlock()
	site := stack.WaitSite(p.pid, f.Threads)
	r := Report{Event: EventDump, PID: p.pid, Path: path, Reason: reason, Seconds: secs, Site: site}
	r.setRank(p.id)
	r.WorldSize = p.id.World
	if werr != nil {
		r.Event, r.Error = "dump_failed", werr.Error()
		a.log.Error("write dump", "rank", p.id.Rank, "pid", p.pid, "err", werr)
	} else {
		a.log.Info("dump", "rank", p.id.Rank, "pid", p.pid, "reason", reason, "path", path, "seconds", secs, "threads", len(f.Threads), "errors", len(f.Errors), "main_thread_at", site)
		// What the dump lacks, a line each (an interpreter whose frames
		// were not read: "Python 3.16.0a1: frames not read: unknown
		// layout").
		for _, e := range f.Errors {
			a.log.Warn("dump incomplete", "rank", p.id.Rank, "pid", p.pid, "path", path, "error", e)
		}
	}
	a.report(r)
	return werr == nil
}

// writeDump writes f into the timeline path (timeline.WriteDump), an
// earlier incarnation's files for its rank moved aside.
func (a *Agent) writeDump(f *dumpfile.File) (string, error) {
	path, aside, err := timeline.WriteDump(a.o.TimelinePath, f)
	if aside != nil {
		if aside.Err != nil {
			a.log.Warn("cannot move an earlier incarnation's dump aside; it is overwritten", "rank", f.Rank, "to", aside.To, "err", aside.Err)
		} else {
			a.log.Info("moved an earlier incarnation's dump aside", "rank", f.Rank, "job", aside.Job, "incarnation", aside.Incarnation, "to", aside.To)
		}
	}
	return path, err
}

// writeTrace writes the flight recorder's events of p as Chrome trace JSON.
func (a *Agent) writeTrace(p procInfo, f *dumpfile.File) {
	recs, over := a.rec.Events(p.pid)
	names := make(map[int]string, len(f.Threads))
	for _, t := range f.Threads {
		names[t.TID] = t.Name
	}
	var buf bytes.Buffer
	m := flight.Meta{PID: p.pid, Rank: p.id.Rank, World: p.id.World, Now: a.o.Monotonic(), Threads: names}
	if err := flight.WriteChrome(&buf, recs, over, m); err != nil {
		a.log.Error("encode trace", "rank", p.id.Rank, "err", err)
		return
	}
	if _, err := timeline.WriteTrace(a.o.TimelinePath, p.id.Rank, p.id.World, buf.Bytes()); err != nil {
		a.mu.Lock()
		a.writeErrs++
		a.mu.Unlock()
		a.log.Error("write trace", "rank", p.id.Rank, "err", err)
	}
}

package agent

import (
	"bytes"
	"context"
	"os"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/dump"
	"github.com/xpu-timer/xpu-timer/collector/capture/flight"
	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/ranks"
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
	members := a.book.Ranks()
	jobs := map[string]bool{}
	for _, p := range members {
		if _, ok := hung[p.PID]; ok {
			jobs[p.ID.Job] = true
		}
	}
	var todo []ranks.Member
	var rewrite []*dumped
	a.mu.Lock()
	for _, p := range members {
		if !jobs[p.ID.Job] {
			continue
		}
		d := a.episode[p.PID]
		if d == nil {
			todo = append(todo, p)
			continue
		}
		if h, ok := hung[p.PID]; ok && d.file.Hang == nil {
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
	n := a.dumpRanks(ctx, todo, a.why(dumpfile.ReasonPeer, hangs[0].Peers))
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

// cause is why a rank is dumped: the reason, its decision when it is
// hung, and its communicators' states.
type cause struct {
	reason dumpfile.Reason
	hang   *timer.Hang
	comms  []timer.CommState
}

// why gives the cause to dump a rank: its decision, when it is hung,
// else other with its communicators from peers (Hang.Peers of the check
// that decided the dumps) or, when no decision holds them (another node's
// marker), from the engine.
func (a *Agent) why(other dumpfile.Reason, peers map[int][]timer.CommState) func(pid int) cause {
	return func(pid int) cause {
		a.mu.Lock()
		h, ok := a.decided[pid]
		a.mu.Unlock()
		if ok {
			return cause{dumpfile.ReasonHang, &h, h.Comms}
		}
		if c, ok := peers[pid]; ok {
			return cause{other, nil, c}
		}
		return cause{other, nil, a.engine.Comms(pid)}
	}
}

// slowDump is how long the dumps of a decision may run before they are
// reported stuck, with where the monitor's goroutines are.
const slowDump = 10 * time.Second

// dumpRanks captures and writes ranks in parallel (at most Parallel at
// once) and returns how many were written.
func (a *Agent) dumpRanks(ctx context.Context, members []ranks.Member, why func(pid int) cause) int {
	if len(members) == 0 {
		return 0
	}
	if err := os.MkdirAll(a.o.TimelinePath, 0o755); err != nil {
		a.mu.Lock()
		a.failures += uint64(len(members))
		a.mu.Unlock()
		a.log.Error("cannot create timeline path; dumps skipped", "path", a.o.TimelinePath, "err", err)
		a.report(Report{Event: EventDumpFailed, Path: a.o.TimelinePath, Error: err.Error()})
		return 0
	}
	pids := make([]int, len(members))
	for i, p := range members {
		pids[i] = p.PID
	}
	a.book.SetDumpStarted(true, pids...)
	a.kick()
	sem := make(chan struct{}, a.o.Parallel)
	var wg sync.WaitGroup
	var mu sync.Mutex
	written := 0
	for _, p := range members {
		if ctx.Err() != nil {
			break
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if a.dumpOne(p, why(p.PID)) {
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
	g := dump.File(pid, dump.Header{}, c, err)
	return dumpfile.Helper{PID: pid, Cmdline: g.Cmdline, State: g.State, Threads: g.Threads, Errors: g.Errors}
}

// dumpOne captures one rank and writes its .stacktrace (with .txt) and its
// flight recorder trace.
func (a *Agent) dumpOne(p ranks.Member, why cause) bool {
	start := time.Now()
	reason := why.reason
	a.engine.Stopped(p.PID) // the stall watch's looks allow its stop
	c, err := a.o.Capturer.Capture(p.PID)
	id := p.ID
	f := dump.File(p.PID, dump.Header{Rank: id.Rank, WorldSize: id.World, LocalRank: id.Local(), LocalWorldSize: id.LocalWorld,
		Host: a.o.Hostname, IP: a.o.IP, JobName: a.o.JobName, PodName: a.o.PodName, Job: id.Job, Incarnation: max(id.Incarnation, 0)}, c, err)
	f.Reason, f.Hang, f.Comms = reason, dump.Decision(why.hang), dump.Comms(why.comms)
	for _, pid := range a.book.Helpers(p.PID) {
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
	a.book.SetDumpSeconds(p.PID, secs)
	a.mu.Lock()
	if werr != nil {
		a.failures++
	} else {
		a.dumps++
		a.episode[p.PID] = &dumped{file: f, path: path}
	}
	a.mu.Unlock()
	site := stack.WaitSite(p.PID, f.Threads)
	r := Report{Event: EventDump, PID: p.PID, Path: path, Reason: reason, Seconds: secs, Site: site}
	r.setRank(p.ID)
	r.WorldSize = p.ID.World
	if werr != nil {
		r.Event, r.Error = EventDumpFailed, werr.Error()
		a.log.Error("write dump", "rank", p.ID.Rank, "pid", p.PID, "err", werr)
	} else {
		a.log.Info("dump", "rank", p.ID.Rank, "pid", p.PID, "reason", reason, "path", path, "seconds", secs, "threads", len(f.Threads), "errors", len(f.Errors), "main_thread_at", site)
		// What the dump lacks, a line each (an interpreter whose frames
		// were not read: "Python 3.16.0a1: frames not read: unknown
		// layout").
		for _, e := range f.Errors {
			a.log.Warn("dump incomplete", "rank", p.ID.Rank, "pid", p.PID, "path", path, "error", e)
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
func (a *Agent) writeTrace(p ranks.Member, f *dumpfile.File) {
	recs, over := a.rec.Events(p.PID)
	names := make(map[int]string, len(f.Threads))
	for _, t := range f.Threads {
		names[t.TID] = t.Name
	}
	var buf bytes.Buffer
	m := flight.Meta{PID: p.PID, Rank: p.ID.Rank, World: p.ID.World, Now: a.o.Monotonic(), Threads: names}
	if err := flight.WriteChrome(&buf, recs, over, m); err != nil {
		a.log.Error("encode trace", "rank", p.ID.Rank, "err", err)
		return
	}
	if _, err := timeline.WriteTrace(a.o.TimelinePath, p.ID.Rank, p.ID.World, buf.Bytes()); err != nil {
		a.mu.Lock()
		a.writeErrs++
		a.mu.Unlock()
		a.log.Error("write trace", "rank", p.ID.Rank, "err", err)
	}
}

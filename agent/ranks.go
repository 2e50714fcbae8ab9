package agent

import (
	"context"
	"errors"
	"log/slog"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/ranks"
	"github.com/xpu-timer/xpu-timer/ranks/identity"
	"github.com/xpu-timer/xpu-timer/timer"
)

// The agent's side of the rank book (package ranks): it reads /proc for
// the looks the book asks for, off the tracer's goroutine, tells the
// engine the identities and reports the ranks.

// see records that pid is traced. Its environment, when new or exec'd,
// is read by the resolver (resolveLoop, or the next Tick), not here: see
// runs on the tracer's goroutine. Until then its calls count as in scope.
func (a *Agent) see(pid int, gpu, reread bool) {
	read, firstGPU := a.book.See(pid, gpu, reread)
	if read {
		select {
		case a.resolveCh <- struct{}{}:
		default:
		}
	}
	if firstGPU {
		a.warm(pid)
	}
}

// warm asks the capture, once per rank, to read ahead what its dump will
// need, once it made a GPU call and is known to be in scope.
func (a *Agent) warm(pid int) {
	if w, ok := a.o.Capturer.(Warmer); ok && a.book.TakeWarm(pid) {
		go w.Warm(pid)
	}
}

// resolveLoop reads the environments of the processes new to the book as
// they come, until ctx is done.
func (a *Agent) resolveLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.resolveCh:
			a.resolveAll(a.book.Unread)
		}
	}
}

// resolveAll makes the looks the book asks for (Unread or Unsettled),
// one pass at a time: a pass asks after the one before.
func (a *Agent) resolveAll(looks func() []ranks.Look) {
	a.resolving.Lock()
	defer a.resolving.Unlock()
	for _, l := range looks() {
		a.resolve(l)
	}
}

// resolve reads a process's identity from its environment, and applies
// the Scope. A process without RANK is looked at again on later ticks,
// then, when it is a rank (it made GPU calls), numbered by order of
// appearance (l.Final).
func (a *Agent) resolve(l ranks.Look) {
	env, err := a.o.Environ(l.PID)
	if errors.Is(err, procfs.ErrNoProcess) {
		// Gone before its look (the read comes after its first event
		// now): its exit, queued behind, closes the record. Numbering it
		// by order would give a dead process a rank.
		return
	}
	if !a.admit(l, env, err) {
		return
	}
	ppid, python := a.o.Parent(l.PID)
	id, ok := a.book.Resolved(l, ranks.Facts{Env: env, Err: err, PPID: ppid, Python: python})
	if !ok {
		return
	}
	if id.Known() {
		a.engine.SetIdentity(l.PID, id.Rank, id.World)
	}
	a.warm(l.PID)
}

// admit applies the agent's Scope to the process of l, whose environment
// was just read (env, or the error reading it). A process out of scope is marked so in
// the book, never becomes a rank, is logged once with the reason, and
// what the engine and the recorder took of it before is forgotten.
func (a *Agent) admit(l ranks.Look, env map[string]string, err error) bool {
	if a.o.Scope.Empty() {
		return true
	}
	pid := l.PID
	p := a.o.Inspect(pid)
	p.PID, p.Env = pid, env
	if err != nil {
		p.Env = nil
	}
	ok, why := a.o.Scope.Admit(p)
	if ok {
		return true
	}
	if a.book.Exclude(l) {
		a.engine.Forget(pid)
		a.rec.Forget(pid)
		a.log.Info("process out of scope: not a rank, not dumped, no metrics", "pid", pid, "why", why)
	}
	return false
}

// outOfScope says whether ev is of a process out of scope. Exits and
// execs always go through (an exec decides again).
func (a *Agent) outOfScope(ev timer.Event) bool {
	switch ev.Kind {
	case timer.KindProcessExit, timer.KindProcessExec:
		return false
	}
	a.see(ev.PID, true, false)
	return a.book.Outside(ev.PID)
}

// commCreated takes the identity of a process that has none from its
// first communicator (ncclCommInitRank's rank and size).
func (a *Agent) commCreated(ev timer.Event) {
	id, changed := a.book.FromComm(ev.PID, int(ev.Rank), int(ev.NRanks))
	if changed {
		a.engine.SetIdentity(ev.PID, id.Rank, id.World)
	}
}

// announce reports a rank once its identity is settled.
func (a *Agent) announce(pid int) {
	an, ok := a.book.Announce(pid)
	if !ok {
		return
	}
	id := an.ID
	r := Report{Event: EventRank, PID: pid}
	r.setRank(id)
	level, msg, attrs := slog.LevelInfo, "rank", []any{"pid", pid, "rank", id.Rank}
	switch {
	case id.FromEnv:
		r.Identity = "environment (" + string(id.Source) + ")"
		attrs = append(attrs, "world_size", id.World, "local_rank", id.LocalRank, "from", id.Source, "gpu_calls", an.GPU)
	case id.Source == identity.SourceNCCL:
		r.Identity = "communicator: no rank in its environment, the rank and size of its first communicator"
		attrs = append(attrs, "world_size", id.World, "from", "nccl communicator", "gpu_calls", an.GPU)
	default:
		r.Identity = "assumed: no RANK in its environment, numbered by order of appearance"
		level, msg = slog.LevelWarn, "process has no RANK in its environment; numbering it by order of appearance"
	}
	// Which process took the rank, and why (see ranks.Book): its parent
	// and whether it runs Python, for a rank that is not the one expected.
	a.log.Log(context.Background(), level, msg, append(attrs, "ppid", an.PPID, "python", an.Python)...)
	a.report(r)
}

// settle reads the environments not read yet, looks again at ranks whose
// identity is not settled (called every tick): after three looks a
// process without RANK is numbered by order. Then it announces the ranks
// not announced yet: at the tick, so that the processes that share an
// identity and start together (a shell and the python it runs, a rank
// and its DataLoader workers) are told apart first.
func (a *Agent) settle() {
	a.resolveAll(a.book.Unread)
	a.resolveAll(a.book.Unsettled)
	for _, pid := range a.book.Live() {
		a.announce(pid)
	}
}

// identity returns pid's identity once it is settled.
func (a *Agent) identity(pid int) (identity.Identity, bool) { return a.book.Identity(pid) }

// exited forgets pid's flight recorder and reports a rank's exit once.
func (a *Agent) exited(pid int) {
	id, rank, ok := a.book.Exit(pid)
	if !ok {
		return
	}
	a.rec.Forget(pid)
	a.forgetLooks(pid)
	if rank {
		r := Report{Event: EventExit, PID: pid}
		r.setRank(id)
		a.report(r)
	}
}

// Inspect reads what a Scope needs of pid beyond its environment: the
// cgroup for a pod UID filter or an explanation, the command line and
// the executable for a command filter.
func Inspect(pid int) ranks.Process {
	p := ranks.Process{PID: pid}
	p.Cgroup, _ = procfs.ReadCgroup(pid)
	p.Cmdline, _ = procfs.Cmdline(pid)
	p.Exe, _ = procfs.Exe(pid)
	return p
}

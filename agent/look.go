package agent

import (
	"time"

	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/timer"
)

// Looker takes the looks at ranks' main threads that the engine's rule
// for silent ranks needs (timer.Look): a rank stuck where no probe fires
// (a gloo collective, a rendezvous store, a Python lock, before its first
// GPU call, or already hung when tracing began).
type Looker interface {
	// Look looks at pid's main thread at monotonic time now.
	Look(pid int, now int64) (timer.Look, bool)
	// Forget drops what is known of pid (it exited or exec'd).
	Forget(pid int)
}

// blindGrace is how long a rank may map no probed library before the log
// says so: frameworks load the CUDA libraries seconds after start.
const blindGrace = 10 * time.Second

// watchState is which detectors watch one rank (metrics.Rank.Detectors).
type watchState struct {
	since       int64 // first look, monotonic ns
	gpu, stacks bool
	told        bool // the log said the GPU probes do not watch it
}

// lookAll looks at every live rank, hands the looks to the engine, and
// keeps which detectors watch each rank: the log says once of a rank that
// no GPU probe watches.
func (a *Agent) lookAll(now int64) {
	for _, pid := range a.book.Live() {
		stacks := false
		if a.o.Looker != nil {
			var l timer.Look
			if l, stacks = a.o.Looker.Look(pid, now); stacks {
				a.engine.Observe(l)
			}
		}
		gpu := a.o.Tracer.Probed(pid)
		a.mu.Lock()
		w := a.watched[pid]
		if w == nil {
			w = &watchState{since: now}
			a.watched[pid] = w
		}
		w.gpu, w.stacks = gpu, stacks
		blind := !gpu && !w.told && now-w.since >= int64(min(blindGrace, a.o.HangTimeout))
		seen := gpu && w.told
		if blind {
			w.told = true
		}
		if seen {
			w.told = false
		}
		a.mu.Unlock()
		switch {
		case blind:
			id, _ := a.identity(pid)
			a.log.Warn("no GPU probe watches this rank: it maps no CUDA/NCCL (MACA/MCCL) library, or one linked statically; only a stall of its main thread is seen",
				"pid", pid, "rank", id.Rank, "stack_watch", stacks)
		case seen:
			id, _ := a.identity(pid)
			a.log.Info("GPU probes now watch this rank", "pid", pid, "rank", id.Rank)
		}
	}
}

// detectors lists what watches pid now (metrics.Rank.Detectors).
func (a *Agent) detectors(pid int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := a.watched[pid]
	if w == nil {
		return nil
	}
	var out []string
	if w.gpu {
		out = append(out, metrics.DetectorGPU)
	}
	if w.stacks {
		out = append(out, metrics.DetectorStacks)
	}
	return out
}

// forgetLooks drops what the looks knew of pid (it exited or exec'd).
func (a *Agent) forgetLooks(pid int) {
	if a.o.Looker != nil {
		a.o.Looker.Forget(pid)
	}
	a.forgetSamples(pid)
	a.mu.Lock()
	delete(a.watched, pid)
	a.mu.Unlock()
}

package agent

import (
	"slices"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/dump"
	"github.com/xpu-timer/xpu-timer/collector/capture/gpuwait"
	"github.com/xpu-timer/xpu-timer/ebpf"
	"github.com/xpu-timer/xpu-timer/timer"
)

// Sampler takes the native samples of every thread of a rank that the
// engine's rule for waits known by their stack needs (timer.Sample): a
// thread spinning or sleeping in a GPU wait, whatever the probes saw.
type Sampler interface {
	// Sample samples pid at monotonic time now.
	Sample(pid int, now int64) (timer.Sample, error)
	// Forget drops what is kept of pid (it exited or exec'd).
	Forget(pid int)
}

// NewSampler returns the Sampler of a live system (collector/capture/gpuwait):
// it shares the dumps' symbol cache and, with tr from OpenTracer, unwinds
// past the return probes' trampolines.
func NewSampler(tr Tracer) Sampler {
	s := &gpuwait.Sampler{Unwinder: dump.Shared()}
	if et, ok := tr.(*ebpf.Tracer); ok {
		s.ReturnAddress = et.ReturnAddress
	}
	return s
}

// minSamplePeriod is the least time between two samples of one rank,
// whatever the timeout.
const minSamplePeriod = 5 * time.Second

// SamplePeriod is the least time between two native samples of one rank
// (give or take half a check interval: samples are taken at checks): a
// fifth of the hang timeout, and at least 5 s.
func SamplePeriod(timeout time.Duration) time.Duration { return max(timeout/5, minSamplePeriod) }

// nextSample is when a rank last sampled at last (0: never) is sampled
// next: a period later, or, when a wait first seen at since can be
// confirmed (a sample past since + timeout) before a second period ends,
// just then, so that a wait is decided within one check of the timeout
// without sampling more often. Samples are taken at checks, whose times
// wander by a few milliseconds against each other: slack (half a check
// interval) lets the check due a period on take it rather than the one
// after.
func nextSample(last, period, slack, since, timeout int64) int64 {
	if last == 0 {
		return 0
	}
	next := last + period - slack
	if since > 0 {
		if c := since + timeout + 1; c > next && c < next+period {
			next = c
		}
	}
	return next
}

// sampleMark is where a rank's samples stand.
type sampleMark struct {
	at int64 // the last sample that counts for the period; 0: none
	// retries is how many samples in a row since at could not stop every
	// thread in time (timer.Sample.Unseen, on a loaded node): each is
	// tried again at the next check, up to maxSampleRetries, so that a
	// wait is first seen or confirmed within a check of when it is due,
	// not a period later.
	retries int
	// confirm is when the sample due for a call whose return is not
	// probed (timer's EnteredSince) is, and confirms how many were taken
	// since: until one tells of the thread (the engine's EnteredSince
	// moves on), one is taken at each check, maxConfirms at most.
	confirm  int64
	confirms int
}

// maxConfirms bounds the samples taken, one a check, for one call whose
// return is not probed until one reads its thread: a thread spinning in
// a launch behind a full queue, on a loaded node, may stay unstopped for
// several (the first decided a check later each time), and one never
// stopped costs that many, then a sample a period.
const maxConfirms = 10

// maxSampleRetries bounds the samples of a rank that missed a thread,
// tried again at the next check before one counts: a thread that cannot
// be stopped at all (in the D state, in a driver) costs its rank's other
// threads at most that many more stops a period.
const maxSampleRetries = 3

// sampleAll samples each live rank that is due and hands the samples to
// the engine. A rank the probes saw issue GPU work within the last period
// is not sampled (it is not stuck, and a healthy probed job costs no
// stop); one that stops issuing is sampled a period after its last work.
// A rank with a thread in a call whose return the probes do not see (a
// launch, timer's EnteredSince) is sampled just past the timeout after
// the entry, whatever its period and its last work, and at each check
// after until a sample reads that thread (maxConfirms): it tells whether
// the thread is blocked in the call (then decided at once) or returned;
// a thread that returns in time costs no stop. A sample
// that fails (the rank exited, or is being dumped) is tried again at the
// next check, and so is, a few times, one that could not stop every
// thread (sampleMark).
func (a *Agent) sampleAll(now int64) {
	if a.o.Sampler == nil {
		return
	}
	a.sampleUnsampled(now)
	period, timeout, slack := int64(SamplePeriod(a.o.HangTimeout)), int64(a.o.HangTimeout), int64(a.o.Interval/2)
	var wake int64
	soonest := func(t int64) {
		if wake == 0 || t < wake {
			wake = t
		}
	}
	for _, pid := range a.book.Live() {
		a.mu.Lock()
		mark := a.sampled[pid]
		a.mu.Unlock()
		since := a.engine.StackWaitSince(pid)
		// The sample that confirms or ends a call whose return is not
		// probed; after one that missed a thread, mark.at is that of the
		// one before: due again now.
		var confirm int64
		if entered := a.engine.EnteredSince(pid); entered > 0 {
			confirm = entered + timeout + 1
		}
		if mark.confirm != confirm {
			mark.confirm, mark.confirms = confirm, 0
		}
		if confirm == 0 || now < confirm || mark.confirms >= maxConfirms {
			if confirm > now {
				soonest(confirm)
			}
			if next := nextSample(mark.at, period, slack, since, timeout); now < next {
				if since > 0 && next == since+timeout+1 {
					soonest(next) // the sample that confirms a wait
				}
				continue
			}
			if lw := a.engine.LastWork(pid); lw > 0 && now-lw < period {
				continue
			}
		}
		s, err := a.o.Sampler.Sample(pid, now)
		if err != nil {
			// Not a sample: tried again at the next check (a rank being
			// dumped, or a stop that timed out on a loaded node), so that
			// a job hung before the attach is still seen at once.
			a.log.Debug("stack sample failed", "pid", pid, "err", err)
			continue
		}
		a.log.Debug("stack sample", "pid", pid, "waits", len(s.Waits), "unseen", len(s.Unseen), "retries", mark.retries)
		if len(s.Unseen) > 0 && mark.retries < maxSampleRetries {
			mark.retries++
		} else {
			mark = sampleMark{at: now, confirm: mark.confirm, confirms: mark.confirms}
		}
		if confirm > 0 && now >= confirm {
			mark.confirms++
		}
		a.setSampleMark(pid, mark)
		a.engine.ObserveSample(s)
	}
	a.mu.Lock()
	a.wakeAt = wake
	a.mu.Unlock()
}

// sampleUnsampled samples, once, each process followed while it already
// ran (Follow) that is not a rank and maps a library whose GPU calls are
// probed. A wait such a process entered before the attach made no call
// for the probes to see, and if its environment names no rank (a
// single-process job, a C++ program such as nccl-tests) nothing else
// would ever make it a rank: a sample that finds it waiting on the GPU
// does, as a GPU call would, and starts the engine's wait, which the
// rank's samples then confirm. A process the probes see making GPU calls
// is a rank by those; one that maps no GPU library is never stopped.
// A sample that fails is tried again at the next check, and so is, a
// few times (maxSampleRetries), one that found no wait but could not stop
// every thread (a spinning one, on a loaded node).
func (a *Agent) sampleUnsampled(now int64) {
	a.mu.Lock()
	pids := make([]int, 0, len(a.unsampled))
	for pid := range a.unsampled {
		pids = append(pids, pid)
	}
	a.mu.Unlock()
	if len(pids) == 0 {
		return
	}
	ranks := a.book.Live()
	for _, pid := range pids {
		if slices.Contains(ranks, pid) || a.book.Outside(pid) || !a.o.Tracer.Probed(pid) {
			a.sampledOnce(pid) // a rank is sampled as one (sampleAll)
			continue
		}
		s, err := a.o.Sampler.Sample(pid, now)
		if err != nil {
			a.log.Debug("first stack sample failed", "pid", pid, "err", err)
			continue
		}
		a.log.Debug("first stack sample", "pid", pid, "waits", len(s.Waits), "unseen", len(s.Unseen))
		if len(s.Waits) == 0 {
			a.mu.Lock()
			if n, ok := a.unsampled[pid]; ok && len(s.Unseen) > 0 && n < maxSampleRetries {
				a.unsampled[pid] = n + 1
			} else {
				delete(a.unsampled, pid)
			}
			a.mu.Unlock()
			continue
		}
		a.sampledOnce(pid)
		a.see(pid, true, false)
		a.setSampleMark(pid, sampleMark{at: now})
		a.engine.ObserveSample(s)
	}
}

// setSampleMark records where pid's samples stand.
func (a *Agent) setSampleMark(pid int, m sampleMark) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.sampled == nil {
		a.sampled = make(map[int]sampleMark)
	}
	a.sampled[pid] = m
}

// sampledOnce takes pid out of the processes sampleUnsampled looks at.
func (a *Agent) sampledOnce(pid int) {
	a.mu.Lock()
	delete(a.unsampled, pid)
	a.mu.Unlock()
}

// wakeIn is how long until the sample that confirms a wait is due, or
// a check the early warning needs (package lagwarn) (0: none is): Run checks then
// rather than at the next interval.
func (a *Agent) wakeIn() time.Duration {
	a.mu.Lock()
	at := a.wakeAt
	a.mu.Unlock()
	if lw := a.lag.Due(); lw != 0 && (at == 0 || lw < at) {
		at = lw
	}
	if at == 0 {
		return 0
	}
	return max(time.Duration(at-a.o.Monotonic()), time.Millisecond)
}

// forgetSamples drops what the samples knew of pid (it exited or exec'd).
func (a *Agent) forgetSamples(pid int) {
	if a.o.Sampler != nil {
		a.o.Sampler.Forget(pid)
	}
	a.mu.Lock()
	delete(a.sampled, pid)
	delete(a.unsampled, pid)
	a.mu.Unlock()
}

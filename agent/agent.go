package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/flight"
	"github.com/xpu-timer/xpu-timer/collector/capture/look"
	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/metrics"
	"github.com/xpu-timer/xpu-timer/ebpf"
	"github.com/xpu-timer/xpu-timer/internal/monoclock"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/lagwarn"
	"github.com/xpu-timer/xpu-timer/ranks"
	"github.com/xpu-timer/xpu-timer/timeline"
	"github.com/xpu-timer/xpu-timer/timer"
)

// Defaults of Options.
const (
	// DefaultInterval is how often the engine is checked.
	DefaultInterval = time.Second
	// DefaultLagWarn is the commands' XPU_TIMER_LAG_WARN: how long peers
	// wait for a rank before the early warning names it (package lagwarn).
	DefaultLagWarn = 30 * time.Second
)

// Options configure an Agent. Zero values take the defaults noted.
type Options struct {
	Settings // what the user chose (settings.go)

	Tracer   Tracer   // required
	Capturer Capturer // nil: detect and report only, never dump (watch)
	// DetectOnly makes OpenMonitor open a loop that decides and reports
	// only (watch): no dumps, metrics server, pushes or NVML.
	DetectOnly bool
	Interval   time.Duration // check period, default DefaultInterval
	Parallel   int           // ranks captured at once, default 4

	Logger   *slog.Logger    // default: discard
	OnReport func(Report)    // every notable event, called from the loop's goroutines (serialise yourself)
	Pusher   *metrics.Pusher // nil: no push
	GPU      GPUSource       // nil: no GPU facts
	Looker   Looker          // nil: a look.Proc with StallWatch, else no looks, so no decisions on silent ranks (see timer's "Silent ranks")
	Sampler  Sampler         // nil: no native samples, so no waits known by their stack (see timer's "Waits known by their stack")
	// LagSampler takes the one stack sample of a lagging or idle rank
	// that the early warning classifies (package lagwarn); nil: Capturer; both
	// nil: activities are unknown.
	LagSampler Capturer

	// Injected for tests.
	Monotonic   func() int64     // CLOCK_MONOTONIC ns
	Now         func() time.Time // wall clock
	Environ     func(pid int) (map[string]string, error)
	Parent      func(pid int) (ppid int, python bool) // its parent process (0 unknown), whether it runs Python
	Descendants func(pid int) []int                   // the processes under pid, parents first (Follow)
	Alive       func(pid int) bool                    // the process still exists
	Inspect     func(pid int) ranks.Process           // cgroup, command line, executable for Scope (Env is filled in)
	Kill        func(pid int) error                   // end the process group of pid (HangKill)
	Hostname    string
}

// Agent is the node loop. Create with New, feed pids with Follow, run with Run.
type Agent struct {
	o      Options
	log    *slog.Logger
	engine *timer.Engine
	rec    *flight.Recorder
	start  time.Time

	book      *ranks.Book    // the traced processes and their identities
	resolveCh chan struct{}  // a process to look at (see)
	resolving sync.Mutex     // one pass of looks at a time (resolveAll)
	lag       *lagwarn.Watch // the early warning (package lagwarn)

	mu        sync.Mutex
	episode   map[int]*dumped    // pids dumped since the last time nothing was hung
	decided   map[int]timer.Hang // the engine's decisions in force (Check's, until Recovered)
	killed    map[int]bool
	lost      uint64
	dumps     uint64
	failures  uint64
	writeErrs uint64
	markers   markerState
	lastTick  int64
	watched   map[int]*watchState // detectors watching each rank (look.go)
	sampled   map[int]sampleMark  // where each rank's samples stand (sample.go)
	unsampled map[int]int         // followed while running, not yet sampled: retries so far (sample.go, sampleUnsampled)
	wakeAt    int64               // a sample due between checks, when (sample.go); 0: none
	checkNow  chan struct{}       // a check wanted before the next interval (Follow)

	pushCh   chan struct{}
	retainCh chan struct{}
}

// dumped is one rank's dump of the current episode.
type dumped struct {
	file *dumpfile.File
	path string
}

// New returns an agent; nothing runs until Run.
func New(o Options) *Agent {
	if o.HangTimeout <= 0 {
		o.HangTimeout = timer.DefaultHangTimeout
	}
	if o.TimelinePath == "" {
		o.TimelinePath = timeline.DefaultPath
	}
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	if o.Looker == nil && o.StallWatch {
		o.Looker = &look.Proc{Monotonic: Monotonic}
	}
	if o.Parallel <= 0 {
		o.Parallel = 4
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Monotonic == nil {
		o.Monotonic = Monotonic
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Environ == nil {
		o.Environ = procfs.Environ
	}
	if o.Parent == nil {
		o.Parent = procfs.ParentPython
	}
	if o.Descendants == nil {
		o.Descendants = procfs.Descendants
	}
	if o.Inspect == nil {
		o.Inspect = Inspect
	}
	if o.Alive == nil {
		o.Alive = procfs.Alive
	}
	if o.Kill == nil {
		o.Kill = procfs.KillGroup
	}
	if o.Hostname == "" {
		o.Hostname, _ = os.Hostname()
	}
	a := &Agent{
		o:         o,
		log:       o.Logger,
		engine:    timer.NewEngine(timer.Config{HangTimeout: o.HangTimeout, Samples: o.Sampler != nil}),
		rec:       flight.New(0),
		start:     o.Now(),
		book:      ranks.NewBook(),
		resolveCh: make(chan struct{}, 1),
		episode:   make(map[int]*dumped),
		decided:   make(map[int]timer.Hang),
		killed:    make(map[int]bool),
		watched:   make(map[int]*watchState),
		pushCh:    make(chan struct{}, 1),
		checkNow:  make(chan struct{}, 1),
		retainCh:  make(chan struct{}, 1),
	}
	a.lag = a.newLagWatch()
	return a
}

// Engine returns the agent's engine.
func (a *Agent) Engine() *timer.Engine { return a.engine }

// Monotonic reads CLOCK_MONOTONIC in nanoseconds, the clock of bpf_ktime_get_ns.
func Monotonic() int64 { return monoclock.Now() }

// Follow traces pid and its descendants, present and future. The
// processes already running under pid (children, grandchildren) are taken
// at once, parents first, as a fork traced from now on would be: the
// tracer probes the libraries they map, and their identity is read, so
// that those that name a rank in their environment are ranks from now,
// not from a next GPU call that a rank hung before we came never makes
// (an agent or a `watch --pid` attached to a job that runs, or a launcher
// that follows its child after the start). A process with no rank in its
// environment is a rank from its first GPU call, as before, or from a
// first sample that finds it waiting on the GPU (sampleUnsampled: a
// single-process job or a C++ program hung before we came makes no call):
// mapping a GPU library says nothing (a launcher that imports torch maps
// CUDA).
func (a *Agent) Follow(pid int) error {
	if err := a.o.Tracer.Follow(pid); err != nil {
		return fmt.Errorf("follow %d: %w", pid, err)
	}
	running := append([]int{pid}, a.o.Descendants(pid)...)
	a.mu.Lock()
	if a.unsampled == nil {
		a.unsampled = make(map[int]int)
	}
	for _, p := range running {
		a.unsampled[p] = 0
	}
	a.mu.Unlock()
	for _, p := range running {
		a.see(p, false, false)
	}
	// Processes that already run are looked at and sampled at once: a
	// job that hung before we came is decided a timeout after the attach,
	// not a check later.
	select {
	case a.checkNow <- struct{}{}:
	default:
	}
	return nil
}

// WaitTracing waits, at most d, until the tracer started by Run reads its
// events: from then on it holds a followed process at each load until
// what it loaded is probed (ebpf.Tracer.Ready), so a job started after it
// is seen from its first call. A tracer that never holds returns at once.
func (a *Agent) WaitTracing(d time.Duration) {
	r, ok := a.o.Tracer.(interface{ Ready() <-chan struct{} })
	if !ok {
		return
	}
	select {
	case <-r.Ready():
	case <-time.After(d):
	}
}

// Run runs the tracer and the check loop until ctx is done. The tracer's
// error ends Run unless ctx is already done.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	tracerErr := make(chan error, 1)
	wg.Add(4)
	go func() {
		defer wg.Done()
		a.resolveLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		err := a.o.Tracer.Run(ctx, a.HandleEvents, a.HandleNotice)
		tracerErr <- err
		cancel()
	}()
	go func() {
		defer wg.Done()
		a.pushLoop(ctx)
	}()
	go func() {
		defer wg.Done()
		a.retainLoop(ctx)
	}()
	t := time.NewTicker(a.o.Interval)
	defer t.Stop()
	// A check per interval, one at once when Follow takes processes that
	// already run (a job attached late is looked at and sampled then, not
	// a check later), and one where a sample confirming a wait is due
	// between two (sampleAll): the wait is then decided as it crosses the
	// timeout, not up to a check later.
	wake := time.NewTimer(a.o.Interval)
	defer wake.Stop()
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-t.C:
			a.Tick(ctx)
		case <-wake.C:
			a.Tick(ctx)
		case <-a.checkNow:
			a.Tick(ctx)
		}
		if d := a.wakeIn(); d > 0 && d < a.o.Interval {
			wake.Reset(d)
		}
	}
	cancel()
	wg.Wait()
	select {
	case err = <-tracerErr:
	default:
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracer: %w", err)
	}
	return nil
}

// HandleEvents consumes a batch of probe events in time order (the
// tracer's callback), as HandleEvent one by one would: the GPU calls
// between two records of another sort (a process's start, exec or exit,
// a communicator's creation) go to the recorder and the engine at once,
// under one lock each, and each of their processes is seen once. It may
// change evs.
func (a *Agent) HandleEvents(evs []timer.Event) {
	for len(evs) > 0 {
		n := 0
		for n < len(evs) && plainCall(evs[n].Kind) {
			n++
		}
		if n == 0 {
			a.HandleEvent(evs[0])
			n = 1
		} else {
			a.handleCalls(evs[:n])
		}
		evs = evs[n:]
	}
}

// plainCall says whether an event of kind k is a GPU call that only the
// engine and the recorder read, and that makes its process a rank
// (HandleEvent's last case).
func plainCall(k timer.Kind) bool {
	switch k {
	case timer.KindProcessExit, timer.KindProcessExec, timer.KindCommInit:
		return false
	}
	return true
}

// handleCalls consumes plain calls (plainCall): each process is seen once
// (seeing it again changes nothing), and the calls of those in scope go
// to the recorder and the engine a run at a time.
func (a *Agent) handleCalls(evs []timer.Event) {
	var seen [8]pidScope // the processes of evs so far; most batches have a few
	known := seen[:0]
	run := 0 // evs[run:i] are in scope, not yet handled
	last, in := 0, false
	for i := range evs {
		if pid := evs[i].PID; i == 0 || pid != last {
			last = pid
			in, known = a.inScope(pid, known)
		}
		if !in {
			a.handleRun(evs[run:i])
			run = i + 1
		}
	}
	a.handleRun(evs[run:])
}

// pidScope is whether a process is in scope.
type pidScope struct {
	pid int
	in  bool
}

// inScope says whether pid is in scope, from known or, the first time,
// after seeing it (as HandleEvent does a call's process), and returns
// known with it.
func (a *Agent) inScope(pid int, known []pidScope) (bool, []pidScope) {
	for _, k := range known {
		if k.pid == pid {
			return k.in, known
		}
	}
	a.see(pid, true, false)
	in := a.o.Scope == nil || !a.book.Outside(pid)
	return in, append(known, pidScope{pid, in})
}

// handleRun hands calls to the recorder, then to the engine, which may
// change them.
func (a *Agent) handleRun(evs []timer.Event) {
	if len(evs) > 0 {
		a.rec.AddAll(evs)
		a.engine.HandleAll(evs)
	}
}

// HandleEvent consumes one probe event.
func (a *Agent) HandleEvent(ev timer.Event) {
	if a.o.Scope != nil && a.outOfScope(ev) {
		return
	}
	a.engine.Handle(ev)
	a.rec.Add(ev)
	switch ev.Kind {
	case timer.KindProcessExit:
		a.exited(ev.PID)
	case timer.KindProcessExec:
		a.forgetLooks(ev.PID)
		a.book.Forked(ev.PID, ev.Parent)
		a.see(ev.PID, false, true)
	case timer.KindCommInit:
		a.see(ev.PID, true, false)
		a.commCreated(ev)
	default:
		a.see(ev.PID, true, false)
	}
}

// HandleNotice consumes one tracer notice (the tracer's callback).
func (a *Agent) HandleNotice(n ebpf.Notice) {
	r := Report{Event: Event(n.Kind), PID: n.PID, Library: n.Library, Attached: n.Attached, Missing: n.Missing}
	if n.Err != nil {
		r.Error = n.Err.Error()
	}
	switch n.Kind {
	case ebpf.NoticeExit:
		// The KindProcessExit event, handed over before this notice, told
		// the book and reported a rank's exit. The follower posts its
		// notices on its own schedule: acting on this one could end a new
		// process that reused the pid meanwhile.
		return
	case ebpf.NoticeExec:
		// Reported only: the KindProcessExec event, handed over before
		// this notice, told the book. Seeing it again here could revive a
		// short-lived process whose exit came in between.
	case ebpf.NoticeError:
		a.log.Warn("tracer", "pid", n.PID, "library", n.Library, "err", n.Err)
	case ebpf.NoticeMissing:
		a.log.Info("symbols missing", "pid", n.PID, "library", n.Library, "missing", n.Missing)
	case ebpf.NoticeAttach:
		a.log.Info("attached", "pid", n.PID, "library", n.Library, "probes", len(n.Attached))
	}
	if r.PID != 0 {
		if id, ok := a.identity(r.PID); ok {
			r.setRank(id)
		}
	}
	a.report(r)
}

func (a *Agent) report(r Report) {
	if a.o.OnReport == nil {
		return
	}
	if r.Time.IsZero() {
		r.Time = a.o.Now()
	}
	a.o.OnReport(r)
}

// Package dump captures everything of one process in one call: the native
// stacks of every thread, the Python stacks read while those threads are
// stopped, and the two merged into one stack per thread, with the process
// and thread states from /proc.
package dump

import (
	"errors"
	"fmt"
	"runtime/debug"
	"sort"
	"sync"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/native"
	"github.com/xpu-timer/xpu-timer/collector/capture/python"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/symbols"
)

// Sentinel errors, shared with the native unwinder.
var (
	ErrNoProcess    = native.ErrNoProcess
	ErrNotPermitted = native.ErrNotPermitted
	ErrExited       = native.ErrExited
)

// Options choose what to capture.
type Options struct {
	NoNative bool          // skip native stacks (no ptrace stop unless Python needs it)
	NoPython bool          // skip Python stacks
	MaxStop  time.Duration // bound on the stop; native.DefaultMaxStop when 0
	// Unwinder is reused across dumps (its symbol cache); the package's
	// shared one when nil.
	Unwinder *native.Unwinder
	// ReturnAddress restores return addresses our uretprobes replaced
	// (ebpf.Tracer.ReturnAddress), so that a thread blocked in a probed
	// call unwinds past it.
	ReturnAddress native.ReturnAddressFunc
	// Lines names native frames from the debug information too: source
	// lines, inlined calls, functions left by tail calls (native.Options).
	// Without it they are named from the symbol tables alone and no debug
	// information is read: a first dump of a torch rank then does not
	// inflate megabytes of libc's compressed DWARF. Python frames have
	// their lines either way.
	Lines bool
}

// Process is one captured process.
type Process struct {
	PID        int            `json:"pid"`
	State      string         `json:"state"`            // e.g. "S (sleeping)"
	Python     string         `json:"python,omitempty"` // interpreter version, when a CPython process
	Threads    []stack.Thread `json:"threads"`          // by thread id
	StoppedFor time.Duration  `json:"stopped_for"`      // longest time any thread was stopped
	Took       time.Duration  `json:"took"`             // the whole capture
	Errors     []string       `json:"errors,omitempty"` // what could not be captured
}

// captureGC is the garbage collector's GOGC while a capture runs. A
// first capture builds its symbol cache, tens of megabytes in a few tens
// of milliseconds, much of it kept: at the default of 100 the collector
// runs several times over, on CPUs the capture was using. Not collecting
// at all is worse: on a VM, the fresh pages a heap grows into cost more
// than collecting and reusing them. 200 made first dumps faster than 100,
// and 400 made the second slower (it paid the first's collection):
// docs/measurements.md, "Figures from code comments". GOMEMLIMIT still
// bounds the heap.
const captureGC = 200

// gcRelaxed counts the captures running; the first one to start sets
// captureGC, the last one to end puts back what was set before.
var gcRelaxed struct {
	sync.Mutex
	n   int
	old int
}

// relaxGC raises GOGC to captureGC for the time of a capture, unless it
// is set higher or off, and returns what puts it back.
func relaxGC() (restore func()) {
	gcRelaxed.Lock()
	defer gcRelaxed.Unlock()
	if gcRelaxed.n == 0 {
		gcRelaxed.old = debug.SetGCPercent(captureGC)
		if gcRelaxed.old < 0 || gcRelaxed.old > captureGC {
			debug.SetGCPercent(gcRelaxed.old)
		}
	}
	gcRelaxed.n++
	return func() {
		gcRelaxed.Lock()
		defer gcRelaxed.Unlock()
		if gcRelaxed.n--; gcRelaxed.n == 0 {
			debug.SetGCPercent(gcRelaxed.old)
		}
	}
}

var (
	sharedOnce sync.Once
	shared     *native.Unwinder
)

// Shared returns the process-wide unwinder (one symbol cache for all dumps).
func Shared() *native.Unwinder {
	sharedOnce.Do(func() { shared = native.NewUnwinder(symbols.NewCache()) })
	return shared
}

// Warm reads ahead, into u's symbol cache (nil: Shared's) and the Python
// reader's image cache, what a capture of pid will need: its libraries'
// call frame information, symbols and line tables, and its interpreter's
// layout. A capture afterwards, with lines or without, pays for none of it.
func Warm(u *native.Unwinder, pid int) error {
	if u == nil {
		u = Shared()
	}
	proc, err := u.Cache().Process(pid) // one read of the mappings serves both
	if err != nil {
		return err
	}
	_, _ = python.OpenMapped(pid, proc.Mappings()) // not Python, or an error the capture will report
	proc.Warm()
	return nil
}

// Capture dumps pid. A process in state D is not ptraced: only its state
// (and Python stacks, read without stopping) are returned. While it runs,
// the collector's GOGC is at least captureGC.
func Capture(pid int, o Options) (*Process, error) {
	begin := time.Now()
	defer relaxGC()()
	u := o.Unwinder
	if u == nil {
		u = Shared()
	}
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return nil, fmt.Errorf("capture %d: %w", pid, ErrNoProcess)
	}
	p := &Process{PID: pid, State: procfs.StateName(st.State)}

	// One read of the mappings serves the Python reader and the native
	// capture.
	var proc *symbols.Process
	if !o.NoNative && st.State != 'D' {
		if proc, err = u.Cache().OpenProcess(pid, o.Lines); err != nil {
			return nil, fmt.Errorf("capture %d: read maps: %w", pid, ErrNoProcess)
		}
		proc.ReadLibcAhead()
	}
	var py *python.Reader
	if !o.NoPython {
		if proc != nil {
			py, err = python.OpenMapped(pid, proc.Mappings())
		} else {
			py, err = python.Open(pid)
		}
		switch {
		case errors.Is(err, python.ErrNotPython):
			py = nil
		case err != nil:
			// An interpreter not read says so in one line of its own:
			// "Python 3.16.0a1: frames not read: unknown layout".
			var unread *python.UnreadError
			if errors.As(err, &unread) {
				p.Errors = append(p.Errors, unread.Error())
			} else {
				p.Errors = append(p.Errors, fmt.Sprintf("python: %v", err))
			}
			py = nil
		default:
			p.Python = py.Version()
		}
	}
	var pyThreads []python.Thread
	var pyErr error
	pyRead := false
	readPython := func() error {
		if py == nil {
			return nil
		}
		pyThreads, pyErr = py.Walk()
		pyRead = true
		return pyErr
	}
	// What does not change is no business of the stop.
	namePython := func() {
		if py != nil && pyErr == nil {
			pyErr = py.Finish(pyThreads)
		}
	}

	byTID := map[int]*stack.Thread{}
	if o.NoNative && py == nil {
		// Nothing to stop for: list threads only.
	} else if o.NoNative || st.State == 'D' {
		readPython()
		namePython()
	} else {
		// On a loaded node a running thread may not stop within half of
		// MaxStop (it waits for a CPU): the others let go, it is copied
		// when it stops, up to half of MaxStop later
		// (native.Options.Stragglers), its Python frames read meanwhile,
		// as it ran. (A second stop could not seize it: the first holds
		// it until it stops.)
		stragglers := o.MaxStop / 2
		if stragglers <= 0 {
			stragglers = native.DefaultMaxStop / 2
		}
		res, err := u.Dump(pid, native.Options{MaxStop: o.MaxStop, WhileStopped: readPython, ReturnAddress: o.ReturnAddress,
			Process: proc, Lines: o.Lines, Stragglers: stragglers})
		p.StoppedFor = res.StoppedFor
		if err != nil {
			if errors.Is(err, native.ErrNotPermitted) || errors.Is(err, native.ErrNoProcess) || errors.Is(err, native.ErrExited) {
				return nil, fmt.Errorf("capture %d: %w", pid, err)
			}
			p.Errors = append(p.Errors, err.Error())
		}
		if res.Partial {
			p.Errors = append(p.Errors, "some threads did not stop in time")
		}
		p.Errors = append(p.Errors, res.Damage...)
		if pyErr == nil && !pyRead && res.WhileStoppedErr != nil {
			pyErr = res.WhileStoppedErr // the read failed (a panic caught), not the bound
		}
		for i := range res.Threads {
			th := res.Threads[i]
			byTID[th.TID] = &th
		}
		namePython()
	}
	if py != nil && !pyRead && pyErr == nil {
		pyErr = errors.New("frames not read: the stop's bound ran out first")
	}
	if pyErr != nil {
		p.Errors = append(p.Errors, fmt.Sprintf("python: %v", pyErr))
	}
	if len(byTID) == 0 {
		tids, err := procfs.Tasks(pid)
		if err != nil {
			return nil, fmt.Errorf("capture %d: %w", pid, ErrExited)
		}
		for _, tid := range tids {
			byTID[tid] = &stack.Thread{TID: tid}
		}
	}
	mainPy := false
	for _, pt := range pyThreads {
		th, ok := byTID[pt.TID]
		if !ok {
			continue // a Python thread state without a live thread
		}
		mainPy = mainPy || pt.TID == pid
		th.Python = pt.Frames
		th.GIL = pt.GIL
		if pt.Name != "" {
			th.Name = pt.Name
		}
		if pt.Error != "" && th.Error == "" {
			th.Error = "python: " + pt.Error
		}
	}
	if th := byTID[pid]; th != nil && py != nil && pyErr == nil && len(th.Python) == 0 {
		// The main thread of an interpreter runs Python: no frames is a
		// read that missed them. A thread that did not stop in time (a
		// straggler) was read as it ran, between two calls maybe: read
		// once more, as it runs still; else say why they are missing.
		if again, err := py.Threads(); err == nil {
			for _, pt := range again {
				if pt.TID == pid && len(pt.Frames) > 0 {
					th.Python, th.GIL = pt.Frames, pt.GIL
				}
			}
		}
		switch {
		case len(th.Python) > 0 || th.Error != "":
		case mainPy:
			th.Error = "python: its thread state held no frame when read"
		default:
			th.Error = "python: no thread state of the interpreter names this thread"
		}
	}
	tids := make([]int, 0, len(byTID))
	for tid := range byTID {
		tids = append(tids, tid)
	}
	sort.Ints(tids)
	for _, tid := range tids {
		th := byTID[tid]
		// The native dump read the name and the state (as they were
		// before the stop: read now, a thread just let go may show R on
		// its way back to sleep) of the threads it stopped.
		if th.Name == "" {
			if name, err := procfs.ThreadName(pid, tid); err == nil {
				th.Name = name
			}
		}
		if th.State == "" {
			if ts, err := procfs.ReadTaskStat(pid, tid); err == nil {
				th.State = string(ts.State)
			}
		}
		if len(th.Python) > 0 && len(th.Native) > 0 {
			th.Merged = stack.Merge(th.Native, th.Python)
		}
		p.Threads = append(p.Threads, *th)
	}
	if _, err := procfs.ReadStat(pid); err != nil && len(p.Threads) == 0 {
		return nil, fmt.Errorf("capture %d: %w", pid, ErrExited)
	}
	p.Took = time.Since(begin)
	return p, nil
}

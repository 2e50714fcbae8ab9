package gpuwait

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/native"
	"github.com/xpu-timer/xpu-timer/collector/capture/python"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/monoclock"
	"github.com/xpu-timer/xpu-timer/timer"
)

// Bounds of one sample.
const (
	// DefaultMaxStop bounds how long a sample keeps any thread stopped.
	DefaultMaxStop = 10 * time.Millisecond
	// maxStack is how much of each stack a sample copies: the innermost
	// frames, where a wait and its caller are.
	maxStack = 64 << 10
	// stragglers is how much longer a sample waits for the threads that
	// did not stop within half of MaxStop, the others let go (a thread
	// spinning in a wait, on a loaded node, waiting for a CPU to reach its
	// stop): each is held only while its own stack is copied.
	stragglers = 100 * time.Millisecond
)

// Sampler takes native samples of every thread of a process and finds the
// threads inside a GPU wait. It is safe for concurrent use.
type Sampler struct {
	Unwinder      *native.Unwinder         // shared with the dumps (its symbol cache); required
	ReturnAddress native.ReturnAddressFunc // see native.Options; nil: a stack ends at a return probe's trampoline
	MaxStop       time.Duration            // default DefaultMaxStop

	mu sync.Mutex
	py map[int]*python.Lazy
}

// Result is one sample of a process.
type Result struct {
	Waits      []timer.ThreadWait // the threads inside a GPU wait
	Unseen     []int              // the threads whose stacks could not be read (not stopped within MaxStop)
	Threads    int                // threads sampled
	StoppedFor time.Duration      // longest time a thread was stopped
	Partial    bool               // MaxStop ran out before every thread stopped: the threads not stopped were not seen
	At         int64              // CLOCK_MONOTONIC ns as the threads were let go: the stacks' instant
}

// Take samples pid: every thread is stopped at once (ptrace, for at most
// MaxStop), the innermost 64 KiB of each stack copied, the threads
// released (those that stopped late each copied and released alone), and
// the copies unwound and classified. The Python frames of
// the threads found waiting are read afterwards, without stopping them.
func (s *Sampler) Take(pid int) (Result, error) {
	maxStop := s.MaxStop
	if maxStop <= 0 {
		maxStop = DefaultMaxStop
	}
	// Named as the hang dumps name them (inlined calls too), so that the
	// routine a wait serves is found where it was inlined.
	res, err := s.Unwinder.Dump(pid, native.Options{MaxStop: maxStop, MaxStack: maxStack, ReturnAddress: s.ReturnAddress,
		Stragglers: stragglers, Lines: true})
	if err != nil {
		return Result{}, fmt.Errorf("sample %d: %w", pid, err)
	}
	at := res.Released // before the unwinding, which may take tens of ms
	if at == 0 {
		at = monoclock.Now()
	}
	out := Result{Threads: len(res.Threads), StoppedFor: res.StoppedFor, Partial: res.Partial, At: at}
	for _, th := range res.Threads {
		if len(th.Native) == 0 && th.Error != "" {
			out.Unseen = append(out.Unseen, th.TID)
			continue
		}
		w, ok := classify(th.Native, th.Error != "")
		if !ok {
			continue
		}
		tw := timer.ThreadWait{TID: th.TID, Call: w.Call, Library: w.Library, From: w.From, Kernel: w.Kernel}
		if th.State != "" {
			tw.State = th.State[0]
		}
		out.Waits = append(out.Waits, tw)
	}
	if len(out.Waits) > 0 {
		s.python(pid, out.Waits)
	}
	return out, nil
}

// Sample takes a sample of pid, asked for at monotonic time now, as
// timer.Engine's ObserveSample takes it: stamped when its threads were let
// go (Result.At). No thread made a call while they were stopped, so a call
// the probes saw before that instant was made before the stacks were
// read, and one after it after: the engine takes the latter, not the
// former, for the end of a wait the sample saw (with the check's start
// as the stamp, a call entered while earlier ranks were sampled ended the
// wait it began; with the end of the Python read, a return meanwhile did
// not end it).
func (s *Sampler) Sample(pid int, now int64) (timer.Sample, error) {
	r, err := s.Take(pid)
	if err != nil {
		return timer.Sample{}, err
	}
	return timer.Sample{PID: pid, Time: max(now, r.At), Waits: r.Waits, Unseen: r.Unseen}, nil
}

// Forget drops what is kept of pid (it exited or exec'd).
func (s *Sampler) Forget(pid int) {
	s.mu.Lock()
	delete(s.py, pid)
	s.mu.Unlock()
}

// python fills the Python frames of the waiting threads.
func (s *Sampler) python(pid int, waits []timer.ThreadWait) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.py == nil {
		s.py = map[int]*python.Lazy{}
	}
	py := s.py[pid]
	if py == nil {
		py = &python.Lazy{}
		s.py[pid] = py
	}
	r := py.Reader(pid)
	if r == nil {
		return
	}
	threads, err := r.Threads()
	if err != nil {
		if errors.Is(err, python.ErrNotPython) || errors.Is(err, python.ErrUnsupported) {
			py.GiveUp()
		}
		return
	}
	for i := range waits {
		for _, th := range threads {
			if th.TID == waits[i].TID {
				waits[i].Python = frames(th.Frames)
				break
			}
		}
	}
}

// frames writes Python frames as "func@file:line;...", innermost first.
func frames(fs []stack.Frame) string {
	var b strings.Builder
	for i, f := range fs {
		if i > 0 {
			b.WriteByte(';')
		}
		b.WriteString(f.Func)
		b.WriteByte('@')
		b.WriteString(f.File)
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(f.Line))
	}
	return b.String()
}

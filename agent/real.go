package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/xpu-timer/xpu-timer/collector/dump"
	"github.com/xpu-timer/xpu-timer/collector/native"
	"github.com/xpu-timer/xpu-timer/ebpf"
	"github.com/xpu-timer/xpu-timer/timer"
)

// OpenTracer loads the eBPF tracer with extra vendor library paths. Its
// error matches ErrNotPermitted (and ebpf.ErrNotPermitted) when eBPF is not
// permitted.
func OpenTracer(libs []string) (Tracer, error) {
	t, err := ebpf.NewTracer(ebpf.Options{Libraries: libs})
	if err != nil {
		if errors.Is(err, ebpf.ErrNotPermitted) {
			return nil, fmt.Errorf("%w: %w", ErrNotPermitted, err)
		}
		return nil, fmt.Errorf("load eBPF tracer: %w", err)
	}
	return ebpfTracer{t}, nil
}

// ebpfTracer adapts *ebpf.Tracer to Tracer.
type ebpfTracer struct{ t *ebpf.Tracer }

func (e ebpfTracer) Follow(pid int) error { return e.t.Follow(pid) }
func (e ebpfTracer) Close() error         { return e.t.Close() }
func (e ebpfTracer) Stats() TracerStats {
	s := e.t.Stats()
	return TracerStats{Events: s.Events, Lost: s.Lost, Processes: s.Processes, Probes: s.Probes}
}
func (e ebpfTracer) Run(ctx context.Context, onEvent func(timer.Event), onNotice func(Notice)) error {
	return e.t.Run(ctx, onEvent, func(n ebpf.Notice) {
		onNotice(Notice{Kind: n.Kind, PID: n.PID, Library: n.Library, Attached: n.Attached, Missing: n.Missing, Err: n.Err})
	})
}

// NewCapturer returns the stack capture of collector/dump: every thread's
// native stack and, for CPython, its Python stack read while the threads
// are stopped, merged. One unwinder (one symbol cache) serves every dump,
// so the ranks of a job, which map the same libraries, share it. With tr
// from OpenTracer, a thread blocked in a call with a return probe (a
// synchronize, a copy) unwinds past the probe's trampoline. It is a
// Warmer.
func NewCapturer(tr Tracer) Capturer {
	d := &dumper{u: dump.Shared()}
	if et, ok := tr.(ebpfTracer); ok {
		d.ra = et.t.ReturnAddress
	}
	return d
}

// dumper captures with collector/dump.
type dumper struct {
	u    *native.Unwinder
	ra   native.ReturnAddressFunc
	warm sync.Mutex // one read-ahead at a time
}

func (d *dumper) Capture(pid int) (*Capture, error) {
	p, err := dump.Capture(pid, dump.Options{Unwinder: d.u, ReturnAddress: d.ra})
	if err != nil {
		return nil, err
	}
	return &Capture{PID: p.PID, State: p.State, Threads: p.Threads, StoppedFor: p.StoppedFor, Took: p.Took, Errors: p.Errors}, nil
}

// Warm reads ahead into the shared cache what a dump of pid will need
// (symbols.Cache.Warm): a first hang dump then costs what a cached one
// does (16 ms instead of 84 for 32 threads over 160 libraries).
func (d *dumper) Warm(pid int) {
	d.warm.Lock()
	defer d.warm.Unlock()
	d.u.Cache().Warm(pid)
}

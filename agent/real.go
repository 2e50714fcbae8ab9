package agent

import (
	"errors"
	"fmt"
	"sync"

	"github.com/xpu-timer/xpu-timer/collector/capture/dump"
	"github.com/xpu-timer/xpu-timer/collector/capture/native"
	"github.com/xpu-timer/xpu-timer/ebpf"
)

// OpenTracer loads the eBPF tracer with the settings' probes: extra vendor
// library paths, the call rings' bytes (0: the default), the parts a user
// turned off (kernel names, copies and events). Its error matches
// ErrNotPermitted (and ebpf.ErrNotPermitted) when eBPF is not permitted.
func OpenTracer(s Settings) (Tracer, error) {
	t, err := ebpf.NewTracer(ebpf.Options{Libraries: s.Libraries, RingBufferBytes: int(min(s.ProbeRingBytes, 1<<30)),
		NoKernelNames: !s.KernelNames, NoCopyEventProbes: !s.CopyEventProbes})
	if err != nil {
		if errors.Is(err, ebpf.ErrNotPermitted) {
			return nil, fmt.Errorf("%w: %w", ErrNotPermitted, err)
		}
		return nil, fmt.Errorf("load eBPF tracer: %w", err)
	}
	return t, nil
}

// NewCapturer returns the stack capture of collector/capture/dump: every thread's
// native stack and, for CPython, its Python stack read while the threads
// are stopped, merged, native frames with their source lines and inlined
// calls (dump.Options.Lines), as gdb shows them. One unwinder (one symbol cache) serves every dump,
// so the ranks of a job, which map the same libraries, share it. With tr
// from OpenTracer, a thread blocked in a call with a return probe (a
// synchronize, a copy) unwinds past the probe's trampoline. It is a
// Warmer.
func NewCapturer(tr Tracer) Capturer {
	d := &dumper{u: dump.Shared()}
	if et, ok := tr.(*ebpf.Tracer); ok {
		d.ra = et.ReturnAddress
	}
	return d
}

// dumper captures with collector/capture/dump.
type dumper struct {
	u    *native.Unwinder
	ra   native.ReturnAddressFunc
	warm sync.Mutex // one read-ahead at a time
}

func (d *dumper) Capture(pid int) (*dump.Process, error) {
	return dump.Capture(pid, dump.Options{Unwinder: d.u, ReturnAddress: d.ra, Lines: true})
}

// Warm reads ahead into the shared cache what a dump of pid will need
// (symbols.Cache.Warm): a first hang dump then costs what a cached one
// does (16 ms instead of 84 for 32 threads over 160 libraries).
func (d *dumper) Warm(pid int) {
	d.warm.Lock()
	defer d.warm.Unlock()
	_ = dump.Warm(d.u, pid) // what fails here, the capture reports
}

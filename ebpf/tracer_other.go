//go:build !linux || !(386 || amd64)

package ebpf

import (
	"context"
	"errors"
	"fmt"

	"github.com/xpu-timer/xpu-timer/timer"
)

// Tracer is unavailable here: the probes are built for x86-64 Linux.
type Tracer struct{}

// NewTracer fails: eBPF capture needs x86-64 Linux.
func NewTracer(Options) (*Tracer, error) {
	return nil, fmt.Errorf("ebpf tracer: %w", errors.ErrUnsupported)
}

func (*Tracer) Follow(int) error { return errors.ErrUnsupported }
func (*Tracer) Run(context.Context, func([]timer.Event), func(Notice)) error {
	return errors.ErrUnsupported
}
func (*Tracer) Stats() Stats                             { return Stats{} }
func (*Tracer) Probed(int) bool                          { return false }
func (*Tracer) Close() error                             { return nil }
func (*Tracer) ReturnAddress(int, uint64) (uint64, bool) { return 0, false }

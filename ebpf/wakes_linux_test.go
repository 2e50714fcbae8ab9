//go:build linux && (386 || amd64)

package ebpf

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/ebpf/internal/ring"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/timer"
)

// The programs wake the collector each time a ring's head passes a
// quarter of the ring, and only then: a thread pinned to one CPU making n
// launches into rings of 1024 slots wakes it n/256 times (give or take
// the one its other calls may add). Then, its process gone, the reader
// rests: a few drains a second, where a 20 ms poll made 100.
func TestWakesEachQuarterRing(t *testing.T) {
	bed := testbed.Build(t)
	bin := gcc(t, filepath.Join(t.TempDir(), "hop"), "testdata/hop.c", "-ldl")
	const slots, n = 1024, 20_000
	quarter := uint64(slots / ring.WakeFraction)
	tr := newTracer(t, Options{Libraries: []string{bed.Lib("libcuda.so.1")}, RingBufferBytes: 4096, slotsPerRing: slots})
	if tr.r.wakes == nil {
		t.Fatal("no wakeups: the ring buffer wakes cannot be polled")
	}
	rec := record(t, tr)
	p := start(t, bin, bed.Lib("libcudart.so.12"), bed.Lib("libfakekernels.so"), strconv.Itoa(n), strconv.Itoa(n))
	p.followed(t, tr)
	rec.waitFor(t, "the exit record", func(evs []timer.Event, _ []Notice) bool {
		return hasEvent(evs, p.pid(), timer.KindProcessExit)
	})
	lo, hi := n/quarter-1, n/quarter+1
	deadline := time.Now().Add(5 * time.Second)
	for tr.Stats().Wakeups < lo && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if w := tr.Stats().Wakeups; w < lo || w > hi {
		t.Errorf("%d wakeups for %d launches on one CPU, rings of %d slots: want %d-%d", w, n, slots, lo, hi)
	}

	time.Sleep(2 * ring.IdleDrains * ring.CollectInterval) // the rings fall idle
	drains := func() uint64 {
		return tr.r.rings.Drains()
	}
	d0 := drains()
	time.Sleep(time.Second)
	// Run and the collector, each every 200 ms (ring.IdleInterval): 10, and
	// leeway; polls of 20 ms would make 100.
	if d := drains() - d0; d > 20 {
		t.Errorf("%d drains in a second at rest, want at most 20", d)
	}
}

// Closing the tracer while its collector rests on the wakeups ends Run
// and the collector at once: no deadlock between the wait, which holds
// the descriptor, and Close, which waits for it.
func TestCloseWhileResting(t *testing.T) {
	tr := newTracer(t, Options{})
	done := make(chan error, 1)
	go func() { done <- tr.Run(context.Background(), nil, nil) }()
	<-tr.Ready()
	time.Sleep(2 * ring.IdleDrains * ring.CollectInterval)
	if !tr.r.rings.Idle() {
		t.Fatal("the rings are not idle with nothing followed")
	}
	closed := make(chan error, 1)
	go func() { closed <- tr.Close() }()
	for _, c := range []struct {
		what string
		ch   chan error
	}{{"Close", closed}, {"Run", done}} {
		select {
		case err := <-c.ch:
			if err != nil {
				t.Errorf("%s: %v", c.what, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not return within 5 s of Close", c.what)
		}
	}
}

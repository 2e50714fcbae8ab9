//go:build linux && (386 || amd64)

package ebpf

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/timer"
)

// The rings count as idle after idleDrains drains that found nothing; the
// first drain that finds a record after that says so (the collector then
// wakes Run) and ends the rest.
func TestCallRingsIdle(t *testing.T) {
	f, r := newFakeRings(2, 16)
	for i := range idleDrains {
		if r.idle() {
			t.Fatalf("idle after %d empty drains", i)
		}
		if r.collect() {
			t.Fatal("an empty drain woke Run")
		}
	}
	if !r.idle() {
		t.Fatalf("not idle after %d empty drains", idleDrains)
	}
	f.write(1, 7, 10, 1)
	if !r.collect() {
		t.Error("the first records after the rest did not wake Run")
	}
	if r.idle() {
		t.Error("idle with records just read")
	}
	f.write(0, 7, 20, 2)
	if r.collect() {
		t.Error("records read while busy woke Run again")
	}
}

// The collector drains before the fullest ring, at the rate it filled
// between the last two drains, is an eighth full, within 1.25 and 20 ms;
// at the fastest pace right after a rest, the rate unknown.
func TestCallRingsPace(t *testing.T) {
	const n = 1024 // an eighth: 128 records
	f, r := newFakeRings(2, n)
	clock := time.Unix(1000, 0)
	r.now = func() time.Time { return clock }
	step := func(what string, d time.Duration, records int, want time.Duration) {
		t.Helper()
		clock = clock.Add(d)
		for i := range records {
			f.write(1, 7, uint64(clock.UnixNano())+uint64(i), 1)
			if i%8 == 0 { // the other ring, slower: the fuller one sets the pace
				f.write(0, 8, uint64(clock.UnixNano())+uint64(i), 1)
			}
		}
		r.collect()
		r.take(^uint64(0), nil, maxPending)
		if got := r.pace(); got != want {
			t.Errorf("%s: pace %v, want %v", what, got, want)
		}
	}
	step("nothing yet", time.Millisecond, 0, collectInterval)
	for range idleDrains - 2 {
		step("not yet idle", time.Millisecond, 0, collectInterval)
	}
	step("idle", time.Millisecond, 0, idleInterval)
	step("woken after a rest", 150*time.Millisecond, n/4, collectInterval/16)
	step("slow: an eighth in 20 ms or more", 10*time.Millisecond, 64, collectInterval)
	step("an eighth in 2 ms", 2*time.Millisecond, 128, 2*time.Millisecond)
	step("an eighth in 0.5 ms: the fastest pace", time.Millisecond, 256, collectInterval/16)
	step("quiet again", 5*time.Millisecond, 0, collectInterval)
}

// The programs wake the collector each time a ring's head passes a
// quarter of the ring, and only then: a thread pinned to one CPU making n
// launches into rings of 1024 slots wakes it n/256 times (give or take
// the one its other calls may add). Then, its process gone, the reader
// rests: a few drains a second, where a 20 ms poll made 100.
func TestWakesEachQuarterRing(t *testing.T) {
	bed := testbed.Build(t)
	bin := gcc(t, filepath.Join(t.TempDir(), "hop"), "testdata/hop.c", "-ldl")
	const slots, n = 1024, 20_000
	quarter := uint64(slots / wakeFraction)
	tr := newTracer(t, Options{Libraries: []string{bed.Lib("libcuda.so.1")}, RingBufferBytes: 4096, slotsPerRing: slots})
	if tr.wakes == nil {
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

	time.Sleep(2 * idleDrains * collectInterval) // the rings fall idle
	drains := func() uint64 {
		tr.rings.mu.Lock()
		defer tr.rings.mu.Unlock()
		return tr.rings.drains
	}
	d0 := drains()
	time.Sleep(time.Second)
	// Run and the collector, each every 200 ms (idleInterval): 10, and
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
	time.Sleep(2 * idleDrains * collectInterval)
	if !tr.rings.idle() {
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

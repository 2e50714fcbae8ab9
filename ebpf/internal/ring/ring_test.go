package ring

import (
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// fakeRings is a Fake that writes records of a thread and a check value.
type fakeRings struct{ *Fake }

func newFakeRings(ncpu, n int) (*fakeRings, *Rings) {
	f, r := NewFake(ncpu, n)
	return &fakeRings{f}, r
}

// write reserves, fills and publishes a record of tid with time and
// handle (the check value) on cpu.
func (f *fakeRings) write(cpu, tid int, time, handle uint64) {
	pos, c := f.Reserve(cpu)
	fill(c, tid, time, handle)
	c.Seq = pos + 1
}

// reserve is Reserve.
func (f *fakeRings) reserve(cpu int) (uint64, *Record) { return f.Reserve(cpu) }

// fill writes a record: its thread and check value where the C struct
// call has its tid and handle.
func fill(c *Record, tid int, time, handle uint64) {
	c.Time = time
	binary.LittleEndian.PutUint32(c.Body[4:], uint32(tid))
	binary.LittleEndian.PutUint64(c.Body[24:], handle)
}

func tid(c *Record) uint32    { return binary.LittleEndian.Uint32(c.Body[4:]) }
func handle(c *Record) uint64 { return binary.LittleEndian.Uint64(c.Body[24:]) }

func handles(cs []Record) []uint64 {
	var out []uint64
	for i := range cs {
		out = append(out, handle(&cs[i]))
	}
	return out
}

// A ring written past its size while nobody reads keeps the last n
// records; the ones overwritten are counted lost, before and after the
// drain that meets them.
func TestCallRingsLapCountedLost(t *testing.T) {
	f, r := newFakeRings(2, 8)
	for i := range 20 {
		f.write(1, 7, uint64(i), uint64(i))
	}
	f.write(0, 8, 100, 100)
	if n := r.Lost(); n != 12 {
		t.Errorf("before the drain: %d lost, want 12", n)
	}
	got := handles(r.Drain(nil))
	want := []uint64{100, 12, 13, 14, 15, 16, 17, 18, 19}
	if !slices.Equal(got, want) {
		t.Errorf("drained %v, want %v", got, want)
	}
	if n := r.Lost(); n != 12 {
		t.Errorf("after the drain: %d lost, want 12", n)
	}
	// Lapped again between two drains: exactly the overwritten ones.
	for i := 20; i < 31; i++ {
		f.write(1, 7, uint64(i), uint64(i))
	}
	if got := handles(r.Drain(nil)); !slices.Equal(got, []uint64{23, 24, 25, 26, 27, 28, 29, 30}) {
		t.Errorf("second drain %v", got)
	}
	if n := r.Lost(); n != 15 {
		t.Errorf("%d lost, want 15", n)
	}
}

// A record reserved but not yet published (its writer preempted) does not
// stop the drain: the records after it are read, and it is read once it
// is published; one overwritten before it was ever published is lost.
func TestCallRingsInFlight(t *testing.T) {
	f, r := newFakeRings(1, 4)
	pos, slow := f.reserve(0)
	f.write(0, 2, 20, 2)
	f.write(0, 3, 30, 3)
	if got := handles(r.Drain(nil)); !slices.Equal(got, []uint64{2, 3}) {
		t.Errorf("drained %v, want [2 3]", got)
	}
	if !r.InFlight() {
		t.Error("the unpublished record is not in flight")
	}
	fill(slow, 1, 10, 1)
	slow.Seq = pos + 1
	if got := handles(r.Drain(nil)); !slices.Equal(got, []uint64{1}) {
		t.Errorf("drained %v, want [1]", got)
	}
	if r.InFlight() || r.Lost() != 0 {
		t.Errorf("in flight %v, lost %d", r.InFlight(), r.Lost())
	}

	_, stuck := f.reserve(0) // position 3, never published
	fill(stuck, 1, 40, 4)
	r.Drain(nil)
	for i := range 4 { // positions 4..7: the last one takes its slot
		f.write(0, 2, uint64(50+i), uint64(5+i))
	}
	if got := handles(r.Drain(nil)); !slices.Equal(got, []uint64{5, 6, 7, 8}) {
		t.Errorf("drained %v, want [5 6 7 8]", got)
	}
	if r.InFlight() || r.Lost() != 1 {
		t.Errorf("in flight %v, lost %d; want the stuck record lost", r.InFlight(), r.Lost())
	}
}

// A Run that does not take what the collector collects makes it lose
// records beyond MaxPending, counted; once Run takes them all, the
// buffers of that backlog are let go.
func TestPendingBound(t *testing.T) {
	const n = 1024
	f, r := newFakeRings(2, n)
	made := 0
	for now := uint64(1); made < MaxPending+5000; {
		for range n / 2 {
			for cpu := range 2 {
				f.write(cpu, 7+cpu, now, 1)
				now++
				made++
			}
		}
		r.Collect()
	}
	if r.npending != MaxPending || r.lost != uint64(made-MaxPending) {
		t.Fatalf("%d made: %d pending, %d lost; want %d, %d", made, r.npending, r.lost, MaxPending, made-MaxPending)
	}
	got := 0
	for dst := make([]Record, 0, 4096); ; {
		dst = r.Take(^uint64(0), dst[:0], cap(dst))
		if len(dst) == 0 {
			break
		}
		got += len(dst)
	}
	if got != MaxPending {
		t.Fatalf("took %d, want %d", got, MaxPending)
	}
	for i, p := range r.pending {
		if cap(p) > n {
			t.Errorf("ring %d keeps a buffer of %d records after its backlog, over its ring's %d", i, cap(p), n)
		}
	}
}

func TestRingSizes(t *testing.T) {
	for _, c := range []struct{ budget, rings, floor, want int }{
		{0, 2, 0, 65536},            // 8 MiB default over 2 rings, their headers beyond it
		{0, 16, 0, 8192},            // and over 16
		{1 << 20, 16, 0, MinSlots},  // the floor, over a small budget
		{1 << 30, 1, 0, 1 << 24},    // as many as fit (at most 1<<24)
		{4096, 2, 8, 32},            // a test's floor
		{5000, 2, 8, 32},            // rounded down to a power of two
		{64 << 20, 4, 0, 256 << 10}, // 64 MiB over 4 rings
	} {
		if got := SlotsPerRing(c.budget, c.rings, c.floor); got != c.want {
			t.Errorf("SlotsPerRing(%d, %d, %d) = %d, want %d", c.budget, c.rings, c.floor, got, c.want)
		}
	}
	// CPUs share at most MaxRings rings, a power of two: the map does not
	// grow with the machine.
	for ncpu, want := range map[int]int{1: 1, 2: 2, 3: 2, 12: 8, 16: 16, 17: 16, 256: 16, 4096: 16} {
		if got := Count(ncpu); got != want {
			t.Errorf("Count(%d) = %d, want %d", ncpu, got, want)
		}
	}
	if bytes := Count(256) * SlotsPerRing(0, Count(256), 0) * Size; bytes > 8<<20 {
		t.Errorf("a 256-CPU machine's ring slots take %d bytes, over the 8 MiB budget", bytes)
	}
}

// take hands over a few records at a time while more are collected in
// between, some from before the cut (a record in flight at the first
// collect, published later): every record from before the cut comes
// once, each ring's in time order, the merge in time order but for those
// late ones, and none from after the cut.
func TestTakeInChunks(t *testing.T) {
	f, r := newFakeRings(2, 1024)
	for i := range 600 {
		f.write(i%2, i%2, uint64(10*i), uint64(10*i))
	}
	r.Collect()
	const cut = 8000
	var got []Record
	for round := 0; ; round++ {
		chunk := r.Take(cut, nil, 37)
		if len(chunk) == 0 {
			break
		}
		got = append(got, chunk...)
		if round < 10 {
			f.write(round%2, 5, uint64(3000+round), uint64(100000+round)) // late, before the cut
			f.write(round%2, 6, uint64(9000+round), uint64(200000+round)) // after it
			r.Collect()
		}
	}
	seen := map[uint64]bool{}
	for _, c := range got {
		if seen[handle(&c)] || c.Time >= cut {
			t.Fatalf("record %d taken twice, or from after the cut", handle(&c))
		}
		seen[handle(&c)] = true
	}
	if len(seen) != 600+10 {
		t.Fatalf("%d records taken, want 610", len(seen))
	}
	for ring := range 2 {
		var last uint64
		for _, c := range got {
			if int(tid(&c))%2 == ring && tid(&c) < 5 {
				if c.Time < last {
					t.Fatalf("ring %d: %d after %d", ring, c.Time, last)
				}
				last = c.Time
			}
		}
	}
	if r.npending != 10 {
		t.Errorf("%d pending, want the 10 after the cut", r.npending)
	}
	if rest := r.Take(20000, nil, 100); len(rest) != 10 || rest[0].Time != 9000 {
		t.Errorf("then %v, want the 10 after the cut from 9000", handles(rest))
	}
}

// take hands out the same records in the same order as a merge that looks
// at every ring for every record (of two alike in time, the lower ring's
// first), whatever the rings, ties, cuts and chunk sizes: with one ring
// holding records, several, or none before the cut.
func TestTakeAsFullMerge(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	for trial := range 300 {
		rings := 1 + rnd.IntN(16)
		f, r := newFakeRings(rings, 256)
		model := make([][]Record, rings)
		busy := 1 + rnd.IntN(rings)
		for i := range 200 {
			ring := rnd.IntN(busy)
			prev := uint64(0)
			if n := len(model[ring]); n > 0 {
				prev = model[ring][n-1].Time
			}
			tm := prev + uint64(rnd.IntN(4)) // ties within and across rings
			f.write(ring, ring, tm, uint64(i))
			var c Record
			fill(&c, ring, tm, uint64(i))
			model[ring] = append(model[ring], c)
		}
		r.Collect()
		cut := uint64(rnd.IntN(300))
		var got []Record
		for {
			chunk := r.Take(cut, nil, 1+rnd.IntN(70))
			if len(chunk) == 0 {
				break
			}
			got = append(got, chunk...)
		}
		var want []Record
		heads := make([]int, rings)
		for {
			best, bt := -1, cut
			for i, p := range model {
				if h := heads[i]; h < len(p) && p[h].Time < bt {
					best, bt = i, p[h].Time
				}
			}
			if best < 0 {
				break
			}
			want = append(want, model[best][heads[best]])
			heads[best]++
		}
		if !slices.Equal(handles(got), handles(want)) {
			t.Fatalf("trial %d (%d rings, %d busy, cut %d): took %v, want %v", trial, rings, busy, cut, handles(got), handles(want))
		}
	}
}

// The rings count as idle after IdleDrains drains that found nothing; the
// first drain that finds a record after that says so (the collector then
// wakes the reader) and ends the rest.
func TestCallRingsIdle(t *testing.T) {
	f, r := newFakeRings(2, 16)
	for i := range IdleDrains {
		if r.Idle() {
			t.Fatalf("idle after %d empty drains", i)
		}
		if r.Collect() {
			t.Fatal("an empty drain woke the reader")
		}
	}
	if !r.Idle() {
		t.Fatalf("not idle after %d empty drains", IdleDrains)
	}
	f.write(1, 7, 10, 1)
	if !r.Collect() {
		t.Error("the first records after the rest did not wake Run")
	}
	if r.Idle() {
		t.Error("idle with records just read")
	}
	f.write(0, 7, 20, 2)
	if r.Collect() {
		t.Error("records read while busy woke the reader again")
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
		r.Collect()
		r.Take(^uint64(0), nil, MaxPending)
		if got := r.pace(); got != want {
			t.Errorf("%s: pace %v, want %v", what, got, want)
		}
	}
	step("nothing yet", time.Millisecond, 0, CollectInterval)
	for range IdleDrains - 2 {
		step("not yet idle", time.Millisecond, 0, CollectInterval)
	}
	step("idle", time.Millisecond, 0, IdleInterval)
	step("woken after a rest", 150*time.Millisecond, n/4, CollectInterval/16)
	step("slow: an eighth in 20 ms or more", 10*time.Millisecond, 64, CollectInterval)
	step("an eighth in 2 ms", 2*time.Millisecond, 128, 2*time.Millisecond)
	step("an eighth in 0.5 ms: the fastest pace", time.Millisecond, 256, CollectInterval/16)
	step("quiet again", 5*time.Millisecond, 0, CollectInterval)
}

package timer

import (
	"math/rand/v2"
	"testing"
)

// An opQueue behaves as a slice that grows at the back and shrinks at the
// front, through block ends, and holds no more blocks than its ops need
// (plus those it keeps).
func TestOpQueue(t *testing.T) {
	var q opQueue
	var model []uint64
	r := rand.New(rand.NewPCG(1, 2))
	next := uint64(0)
	for step := range 20000 {
		// Grow for a while, then drain, then wander around a block's end.
		grow := step < 5000 || step >= 10000 && r.IntN(2) == 0
		if grow || len(model) == 0 {
			next++
			q.grow().pos = next
			model = append(model, next)
		} else {
			if o := q.front(); o.pos != model[0] {
				t.Fatalf("step %d: front %d, want %d", step, o.pos, model[0])
			}
			q.drop()
			model = model[1:]
		}
		if q.n != len(model) {
			t.Fatalf("step %d: %d queued, want %d", step, q.n, len(model))
		}
		if q.n > 0 && q.front().pos != model[0] {
			t.Fatalf("step %d: front %d, want %d", step, q.front().pos, model[0])
		}
		if i := len(model) / 2; q.n > 0 && q.at(i).pos != model[i] {
			t.Fatalf("step %d: op %d is %d, want %d", step, i, q.at(i).pos, model[i])
		}
		if need := (q.head + q.n + queueBlock - 1) / queueBlock; len(q.blocks) > max(need, 1) || len(q.spares) > keptBlocks {
			t.Fatalf("step %d: %d blocks for %d ops from %d, %d kept", step, len(q.blocks), q.n, q.head, len(q.spares))
		}
	}
	if len(model) == 0 || q.n == 0 {
		t.Fatal("the walk ended empty: nothing checked at the end")
	}
	for i := range model {
		if q.at(i).pos != model[i] {
			t.Fatalf("op %d is %d, want %d", i, q.at(i).pos, model[i])
		}
	}
}

// A queue that fills with a step's ops and drains at its synchronize, as
// a training step's stream does, allocates nothing once it has run one
// step: it keeps the blocks it drained (one block was kept before, and
// each step allocated the rest again).
func TestOpQueueStepMakesNoGarbage(t *testing.T) {
	var q opQueue
	step := func() {
		for range 6 * queueBlock {
			q.grow()
		}
		for q.n > 0 {
			q.drop()
		}
	}
	step()
	if a := testing.AllocsPerRun(100, step); a != 0 {
		t.Fatalf("%.1f allocations a step, want 0", a)
	}
	if q.n != 0 || len(q.spares) == 0 {
		t.Fatalf("%d ops left, %d blocks kept: the steps measured nothing", q.n, len(q.spares))
	}
}

// A stream at its limit drops its oldest op for each new one.
func TestStreamPushDropsOldest(t *testing.T) {
	var s stream
	dropped := 0
	for i := range 3 * queueBlock {
		o, d := s.add(queueBlock + 5)
		if *o != (qop{}) {
			t.Fatalf("op %d: handed out %+v, not a zero op", i, *o)
		}
		o.pos = uint64(i)
		if d {
			dropped++
		}
	}
	if s.q.n != queueBlock+5 || dropped != 2*queueBlock-5 || s.q.front().pos != 2*queueBlock-5 {
		t.Fatalf("%d queued from %d, %d dropped; want %d from %d, %d", s.q.n, s.q.front().pos, dropped, queueBlock+5, 2*queueBlock-5, 2*queueBlock-5)
	}
}

package timer

// queueBlock is how many ops a block of an opQueue holds (8 KiB).
const queueBlock = 64

// opQueue is a stream's outstanding ops, oldest first, in blocks of
// queueBlock taken as it grows and let go as it drains: a queue that grows
// to MaxOpsPerStream (a launch-bound loop that nothing retires) never
// stops to copy itself (one array doubled in place copied megabytes and
// held the reader for tens of milliseconds), and a queue that
// drains does not keep its largest size. Up to keptBlocks drained blocks
// are kept for the next ops, so that a queue that fills and drains each
// step (a training step's launches, retired at its synchronize) or goes up
// and down around a block's end makes no garbage: one spare block made
// the reader allocate 6 of 8 KiB a step of the testbed's training step
// (9 % of its CPU, with the collections they caused).
type opQueue struct {
	blocks []*[queueBlock]qop
	head   int // the oldest op's index in blocks[0]
	n      int
	spares []*[queueBlock]qop // drained blocks, zero, at most keptBlocks
}

// keptBlocks bounds the drained blocks a queue keeps: 512 ops, 64 KiB, a
// step's launches on its busiest stream.
const keptBlocks = 8

// at is the i-th oldest op, 0 <= i < q.n.
func (q *opQueue) at(i int) *qop {
	j := q.head + i
	return &q.blocks[j/queueBlock][j%queueBlock]
}

// front is the oldest op; q.n > 0.
func (q *opQueue) front() *qop { return &q.blocks[0][q.head] }

// grow adds a newest op, zero, and returns it: the caller fills it in
// place (an op is 128 bytes).
func (q *opQueue) grow() *qop {
	j := q.head + q.n
	if j/queueBlock == len(q.blocks) {
		var b *[queueBlock]qop
		if k := len(q.spares); k > 0 {
			b, q.spares[k-1] = q.spares[k-1], nil
			q.spares = q.spares[:k-1]
		} else {
			b = new([queueBlock]qop)
		}
		q.blocks = append(q.blocks, b)
	}
	q.n++
	return &q.blocks[j/queueBlock][j%queueBlock] // zero: new, or cleared by drop
}

// drop forgets the oldest op; q.n > 0.
func (q *opQueue) drop() {
	b := q.blocks[0]
	b[q.head] = qop{} // what it points to may go, and grow hands out zero ops
	q.head++
	q.n--
	switch {
	case q.n == 0:
		q.head = 0 // the block stays, empty
	case q.head == queueBlock:
		if len(q.spares) < keptBlocks {
			q.spares = append(q.spares, b)
		}
		// Moved down, not resliced: a slice that creeps forward grows
		// a new array every few blocks.
		k := copy(q.blocks, q.blocks[1:])
		q.blocks[k] = nil
		q.blocks = q.blocks[:k]
		q.head = 0
	}
}

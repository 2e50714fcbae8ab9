package ring

import "unsafe"

// Fake writes rings into memory the way reserve and publish in
// probes.bpf.c do, for the tests and benchmarks of what reads them.
type Fake struct {
	Mem []byte
	n   uint64
}

// NewFake is rings rings of n slots in memory of their own, and the
// Rings that reads them.
func NewFake(rings, n int) (*Fake, *Rings) {
	mem := make([]byte, Bytes(rings, n))
	return &Fake{Mem: mem, n: uint64(n)}, New(mem, rings, n, nil)
}

// Entry is entry i of the memory (block headers included).
func (f *Fake) Entry(i uint64) *Record {
	return (*Record)(unsafe.Pointer(&f.Mem[i*uint64(Size)]))
}

// Head is ring r's header: its Seq is how many records were reserved.
func (f *Fake) Head(r int) *Record { return f.Entry(uint64(r) * (f.n + 1)) }

// Slot is the record pos of ring r.
func (f *Fake) Slot(r int, pos uint64) *Record {
	return f.Entry(uint64(r)*(f.n+1) + 1 + pos%f.n)
}

// Reserve takes the next slot of ring r and marks it (Seq 0); the caller
// fills it and publishes it by setting its Seq to pos+1 last.
func (f *Fake) Reserve(r int) (pos uint64, c *Record) {
	h := f.Head(r)
	pos = h.Seq
	h.Seq++
	c = f.Slot(r, pos)
	*c = Record{}
	return pos, c
}

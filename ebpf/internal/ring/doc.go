// Package ring reads the call rings of probes.bpf.c (reserve and publish)
// out of their memory: the layout, the seqlock read of a slot, the
// counting of records lost, the per-ring time order and the merge of the
// rings by time, and the pace of the collector that drains them. It knows
// nothing of the kernel: the memory comes from the caller (a mapping of
// the BPF map calls, or a byte slice a test writes as the programs do),
// and so do the wakeups (a Waker), so that all of it is tested without
// privileges.
//
// # Layout
//
// Each ring's block is a header (its Seq: the head, how many records were
// ever reserved there) and n slots of one Record each; record pos lives in
// slot pos % n. A writer takes pos with a fetch-and-add on the head, marks
// the slot (Seq 0), writes it and publishes it by storing Seq = pos+1
// last. The reader keeps, per ring, the position it has read up to (its
// tail) and the positions below it that were reserved but not yet
// published when it looked (in flight: a writer preempted inside its
// program, or one on another CPU of the ring). A slot is read like a
// seqlock: Seq, copy, Seq again; a copy is good when both equal pos+1.
// Whatever the writers overwrote before it was read is counted lost.
//
// One case the seqlock cannot catch: a writer preempted inside its program
// for a whole lap of its ring (n records written there meanwhile) goes on
// writing into a slot that a later record owns, and may tear that record
// without changing its Seq. The record it was writing is counted lost; the
// torn one is not detected.
//
// # Who calls what
//
// Rings is safe for concurrent use: the collector (Poll, on a goroutine
// of its own) copies the rings into memory, and the reader (Collect, Take,
// on the goroutine that delivers) takes the records in time order.
package ring

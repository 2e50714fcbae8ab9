//go:build linux && (386 || amd64)

package ebpf

import (
	"encoding/binary"
	"math"
	"unsafe"

	"github.com/xpu-timer/xpu-timer/timer"
)

// Process record kinds of probes.bpf.c (enum proc_kind, EV_*), beyond
// every timer.Kind, as struct call's one-byte kind.
const (
	evFork = uint8(probesProcKindEV_FORK)
	evExec = uint8(probesProcKindEV_EXEC)
	evExit = uint8(probesProcKindEV_EXIT)
	evMmap = uint8(probesProcKindEV_MMAP)
)

// rawCall views a ring buffer sample as the C struct call.
func rawCall(b []byte) (*probesCall, bool) {
	if len(b) < callSize {
		return nil, false
	}
	var c probesCall
	copy(unsafe.Slice((*byte)(unsafe.Pointer(&c)), callSize), b)
	return &c, true
}

// decode turns a call record into ev, in place (the capture layer fills
// Kernel and split communicator ids afterwards). Which payload field holds
// what, per kind, is the table in probes.bpf.c's header comment.
func decode(ev *timer.Event, r *probesCall) {
	// Cleared, then set field by field: a composite literal would be
	// built aside and copied, twice the stores.
	*ev = timer.Event{}
	ev.Time, ev.PID, ev.TID = int64(r.Time), int(r.Pid), int(r.Tid)
	ev.Kind, ev.Phase, ev.Vendor = timer.Kind(r.Kind), timer.Phase(r.Phase), timer.Vendor(r.Vendor)
	ev.Ret, ev.Stream, ev.Peer = r.Ret, r.Stream, -1
	switch ev.Kind {
	case timer.KindLaunch:
		ev.Ret = 0 // the block (an entry record's ret holds a word of its kind)
		ev.Func = r.Handle
		g, b := r.Handle2, uint32(r.Ret)
		ev.Grid = [3]uint32{uint32(g), uint32(g>>32) & 0xffff, uint32(g >> 48)}
		ev.Block = [3]uint32{b & 0x7ff, b >> 11 & 0x7ff, b >> 22 & 0x3ff}
		ev.Shmem = r.Size
	case timer.KindMemcpyAsync, timer.KindMemcpy:
		ev.Bytes = r.Size
		ev.CopyKind = int32(r.Handle2)
	case timer.KindEventElapsed:
		ev.Handle, ev.Handle2 = r.Handle, r.Handle2
		ev.ElapsedMs = math.Float32frombits(uint32(r.Size))
	case timer.KindCommInit:
		ev.Stream = 0 // the first half of the id
		ev.Comm = r.Handle2
		if r.Op == 1 { // a split: see commIDs.split
			ev.Handle = r.Handle // parent communicator
			ev.Rank = -1         // not known at the split
			break
		}
		binary.LittleEndian.PutUint64(ev.CommID[:8], r.Stream)
		binary.LittleEndian.PutUint64(ev.CommID[8:], r.Handle)
		ev.NRanks, ev.Rank = int32(r.Size), int32(r.Size>>32)
	case timer.KindCommDestroy:
		ev.Comm = r.Handle2
	case timer.KindCall:
		var c callName
		if int(r.Op) < len(callNames) {
			c = callNames[r.Op]
		}
		ev.CallName = c.symbol
		if !c.stream {
			ev.Stream = 0 // the first argument, no stream
		}
	case timer.KindCollective:
		ev.Ret = 0 // the peer
		ev.Op = timer.CollOp(r.Op)
		ev.Comm = r.Handle2
		ev.Count = r.Size
		ev.Dtype, ev.RedOp, ev.Peer = int32(r.Handle), int32(r.Handle>>32), r.Ret
	default: // graph launch, event record, query, synchronize, stream wait
		ev.Handle = r.Handle
	}
}

// idHash folds a 128-byte ncclUniqueId into 16 bytes exactly as
// comm_init_enter does in BPF.
func idHash(id [128]byte) [16]byte {
	h1, h2 := uint64(0xcbf29ce484222325), uint64(0x84222325cbf29ce4)
	for i := 0; i < 16; i++ {
		w := binary.LittleEndian.Uint64(id[8*i:])
		h1 = (h1 ^ w) * 0x100000001b3
		h2 = (h2 ^ w) * 0x9e3779b97f4a7c15
		h2 ^= h2 >> 29
	}
	var out [16]byte
	binary.LittleEndian.PutUint64(out[:8], h1)
	binary.LittleEndian.PutUint64(out[8:], h2)
	return out
}

// commIDs remembers the cross-process ids of one process's communicators,
// to name those split from them.
type commIDs struct {
	ids    map[uint64][16]byte // ncclComm_t -> id
	splits map[uint64]uint64   // parent ncclComm_t -> splits so far
}

// split derives the id of a communicator split from parent with color:
// every member calls ncclCommSplit on the same parent in the same order,
// so (parent id, color, how many splits of parent came before) is the
// same on each of them.
func (c *commIDs) split(parent uint64, color int32) [16]byte {
	n := c.splits[parent]
	c.splits[parent] = n + 1
	var in [128]byte
	pid := c.ids[parent]
	copy(in[:16], pid[:])
	binary.LittleEndian.PutUint32(in[16:], uint32(color))
	binary.LittleEndian.PutUint64(in[24:], n)
	copy(in[32:], "ncclCommSplit")
	return idHash(in)
}

// complete fills what the BPF side cannot: the kernel's name and the id
// of a split communicator. Called from Run's goroutine.
func (r *reader) complete(ev *timer.Event, raw *probesCall) {
	switch ev.Kind {
	case timer.KindLaunch:
		ev.Kernel = r.names.lookup(ev.PID, ev.Func, ev.Time)
	case timer.KindCommInit:
		c := r.comms[ev.PID]
		if c == nil {
			c = &commIDs{ids: map[uint64][16]byte{}, splits: map[uint64]uint64{}}
			r.comms[ev.PID] = c
		}
		if raw.Op == 1 {
			ev.CommID = c.split(raw.Handle, int32(raw.Size)) // the color
		}
		if ev.Ret == 0 {
			c.ids[ev.Comm] = ev.CommID
		}
	}
}

package timer

import (
	"testing"
	"time"
)

const sec = int64(time.Second)
const ms = int64(time.Millisecond)

// Event builders for synthetic sequences. Times are in seconds as float.

func at(s float64) int64 { return int64(s * float64(sec)) }

func launch(t float64, pid, tid int, stream uint64, kernel string) Event {
	return Event{Time: at(t), PID: pid, TID: tid, Kind: KindLaunch, Stream: stream, Kernel: kernel,
		Grid: [3]uint32{108, 1, 1}, Block: [3]uint32{256, 1, 1}}
}

func record(t float64, pid, tid int, ev, stream uint64) Event {
	return Event{Time: at(t), PID: pid, TID: tid, Kind: KindEventRecord, Handle: ev, Stream: stream}
}

func query(t float64, pid, tid int, ev uint64, ret int32) Event {
	return Event{Time: at(t), PID: pid, TID: tid, Kind: KindEventQuery, Phase: PhaseExit, Handle: ev, Ret: ret}
}

func enter(t float64, pid, tid int, k Kind, stream, ev uint64) Event {
	return Event{Time: at(t), PID: pid, TID: tid, Kind: k, Phase: PhaseEnter, Stream: stream, Handle: ev}
}

func exit(t float64, pid, tid int, k Kind, stream, ev uint64, ret int32) Event {
	return Event{Time: at(t), PID: pid, TID: tid, Kind: k, Phase: PhaseExit, Stream: stream, Handle: ev, Ret: ret}
}

func commInit(t float64, pid int, handle uint64, id byte, rank, nranks int32) Event {
	ev := Event{Time: at(t), PID: pid, TID: pid, Kind: KindCommInit, Phase: PhaseExit, Comm: handle, Rank: rank, NRanks: nranks}
	ev.CommID[0] = id
	return ev
}

func allReduce(t float64, pid int, handle, stream, count uint64) Event {
	return Event{Time: at(t), PID: pid, TID: pid, Kind: KindCollective, Op: OpAllReduce, Count: count, Dtype: 9,
		Comm: handle, Stream: stream, Peer: -1}
}

func feed(e *Engine, evs ...Event) {
	for _, ev := range evs {
		e.Handle(ev)
	}
}

func pending(t *testing.T, e *Engine, pid int) int {
	t.Helper()
	st, ok := e.State(pid, 0)
	if !ok {
		t.Fatalf("no state for pid %d", pid)
	}
	return st.Pending
}

func newTestEngine() *Engine { return NewEngine(Config{HangTimeout: 10 * time.Second}) }

// twoRankEngine is newTestEngine with pids 1 and 2 ranks 0 and 1 of a
// world of 2.
func twoRankEngine() *Engine {
	e := newTestEngine()
	e.SetIdentity(1, 0, 2)
	e.SetIdentity(2, 1, 2)
	return e
}

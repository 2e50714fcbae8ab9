package timer

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// lagStep is one step of a rank in the lag tests: n all-reduces on
// stream 5 of communicator handle at t, then a stream synchronize
// entered just after, which returns after syncFor seconds (0: never).
func lagStep(pid int, handle uint64, t float64, n int, syncFor float64) []Event {
	var evs []Event
	for range n {
		evs = append(evs, allReduce(t, pid, handle, 5, 1024))
	}
	evs = append(evs, enter(t+0.01, pid, pid, KindStreamSynchronize, 5, 0))
	if syncFor > 0 {
		evs = append(evs, exit(t+0.01+syncFor, pid, pid, KindStreamSynchronize, 5, 0, 0))
	}
	return evs
}

// lagJob is the events of each process (pid i+1, rank i) of a job on
// communicator 0x42 (handle 0xa0+pid): each created it at 0.
func lagJob(n int) [][]Event {
	procs := make([][]Event, n)
	for i := range procs {
		procs[i] = []Event{commInit(0, i+1, 0xa0+uint64(i+1), 0x42, int32(i), int32(n))}
	}
	return procs
}

// lagEngine feeds procs, one process after another in the given order
// (each one's events in time order, as the engine requires).
func lagEngine(procs [][]Event, reverse bool) *Engine {
	e := NewEngine(Config{HangTimeout: 300 * time.Second})
	for i := range procs {
		e.SetIdentity(i+1, i, len(procs))
	}
	order := make([]int, len(procs))
	for i := range order {
		order[i] = i
	}
	if reverse {
		slices.Reverse(order)
	}
	for _, i := range order {
		evs := slices.Clone(procs[i])
		slices.SortStableFunc(evs, func(a, b Event) int { return int(a.Time - b.Time) })
		feed(e, evs...)
	}
	return e
}

func TestLaggards(t *testing.T) {
	id := CommIDString([16]byte{0x42})
	const wait = 30 * time.Second
	h := func(pid int) uint64 { return 0xa0 + uint64(pid) }
	// Three ranks finish step 1 together; in step 2 ranks 0 and 1 issue
	// their three collectives and wait in the first, rank 2 issues none.
	sleeper := func() [][]Event {
		p := lagJob(3)
		for pid := 1; pid <= 3; pid++ {
			p[pid-1] = append(p[pid-1], lagStep(pid, h(pid), 1, 3, 0.1)...)
		}
		p[0] = append(p[0], lagStep(1, h(1), 2, 3, 0)...)
		p[1] = append(p[1], lagStep(2, h(2), 2.5, 3, 0)...)
		return p
	}
	behind := Laggard{PID: 3, Rank: 2, Comm: id, Issued: 3, Seq: 4, Op: "AllReduce", PeerPID: 1, PeerRank: 0, Peers: 1, Since: at(2.01)}
	both := behind
	both.Peers = 2
	for _, c := range []struct {
		name  string
		procs [][]Event
		now   float64
		wait  time.Duration
		want  []Laggard
	}{
		{"a rank that never issued the collective its peers wait in", sleeper(), 32.02, wait, []Laggard{behind}},
		{"not before its peers waited the warning's wait", sleeper(), 32, wait, nil},
		{"each peer that waited the warning's wait counts", sleeper(), 33, wait, []Laggard{both}},
		{"off", sleeper(), 100, 0, nil},
		{"the rank catches up", func() [][]Event {
			p := sleeper()
			p[2] = append(p[2], allReduce(40, 3, h(3), 5, 1024))
			return p
		}(), 41, wait, nil},
		{"every rank issued it and waits (a dead network): none behind", func() [][]Event {
			p := sleeper()
			p[2] = append(p[2], lagStep(3, h(3), 2.2, 3, 0)...)
			return p
		}(), 100, wait, nil},
		{"a rank that has not seen its own earlier collectives complete still lags", func() [][]Event {
			p := lagJob(3)
			for pid := 1; pid <= 2; pid++ {
				p[pid-1] = append(p[pid-1], lagStep(pid, h(pid), 1, 3, 0.1)...)
				p[pid-1] = append(p[pid-1], lagStep(pid, h(pid), 2, 3, 0)...)
			}
			p[2] = append(p[2], lagStep(3, h(3), 1, 3, 0)...) // its synchronize never returns
			return p
		}(), 40, wait, []Laggard{{PID: 3, Rank: 2, Comm: id, Issued: 3, Seq: 4, Op: "AllReduce", PeerPID: 1, PeerRank: 0, Peers: 2, Since: at(2.01)}}},
		{"a watchdog polling the collectives' end event waits as well", func() [][]Event {
			p := lagJob(2)
			p[0] = append(p[0], allReduce(1, 1, h(1), 5, 1024), record(1, 1, 1, 0xe1, 5))
			for q := 1.1; q < 40; q += 0.1 {
				p[0] = append(p[0], query(q, 1, 7, 0xe1, RetNotReady))
			}
			return p
		}(), 40, wait, []Laggard{{PID: 2, Rank: 1, Comm: id, Issued: 0, Seq: 1, Op: "AllReduce", PeerPID: 1, PeerRank: 0, Peers: 1, Since: at(1.1)}}},
		{"a communicator whose creation was not seen links nobody", func() [][]Event {
			p := sleeper()
			for i := range p {
				p[i] = p[i][1:]
			}
			return p
		}(), 100, wait, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, reverse := range []bool{false, true} {
				got := lagEngine(c.procs, reverse).Laggards(at(c.now), c.wait)
				if len(got) == 0 {
					got = nil
				}
				if !reflect.DeepEqual(got, c.want) {
					t.Errorf("reverse %v: laggards\n%+v\nwant\n%+v", reverse, got, c.want)
				}
			}
		})
	}
}

// A healthy job with uneven steps: rank 2 is 30 % slower, so ranks 0 and
// 1 wait for it in every all-reduce, a fraction of a second each time.
// None lags at the warning's wait; with a wait shorter than theirs, rank
// 2 does (the rule, not the job, tells them apart).
func TestLaggardsUnevenSteps(t *testing.T) {
	p := lagJob(3)
	const steps = 40
	for s := range steps {
		t0 := float64(s)
		for pid := 1; pid <= 2; pid++ {
			p[pid-1] = append(p[pid-1], lagStep(pid, 0xa0+uint64(pid), t0, 3, 0.31)...)
		}
		p[2] = append(p[2], lagStep(3, 0xa3, t0+0.3, 3, 0.01)...)
	}
	// The last step: ranks 0 and 1 wait, rank 2 has not issued yet.
	for pid := 1; pid <= 2; pid++ {
		p[pid-1] = append(p[pid-1], lagStep(pid, 0xa0+uint64(pid), steps, 3, 0)...)
	}
	for _, reverse := range []bool{false, true} {
		e := lagEngine(p, reverse)
		if got := e.Laggards(at(steps+0.25), 30*time.Second); len(got) != 0 {
			t.Errorf("reverse %v: laggards %+v, want none", reverse, got)
		}
		got := e.Laggards(at(steps+0.25), 200*time.Millisecond)
		if len(got) != 1 || got[0].Rank != 2 || got[0].Seq != 3*steps+1 || got[0].Issued != 3*steps || got[0].Peers != 2 {
			t.Errorf("reverse %v: laggards %+v, want rank 2 behind #%d", reverse, got, 3*steps+1)
		}
	}
}

func TestProgressAndAwaiting(t *testing.T) {
	p := lagJob(2)
	other := Event{Time: at(0.5), PID: 2, TID: 2, Kind: KindCommInit, Phase: PhaseExit, Comm: 0xb2, Rank: 0, NRanks: 4}
	other.CommID[0] = 0x43
	p[0] = append(p[0], lagStep(1, 0xa1, 1, 3, 0.1)...)
	p[0] = append(p[0], lagStep(1, 0xa1, 2, 2, 0)...)
	// Rank 1 waits in a collective of another communicator.
	p[1] = append(p[1], other, launch(1.5, 2, 2, 5, "gemm"), allReduce(1.6, 2, 0xb2, 5, 64),
		enter(1.7, 2, 2, KindStreamSynchronize, 5, 0))
	for _, reverse := range []bool{false, true} {
		e := lagEngine(p, reverse)
		a := CommIDString([16]byte{0x42})
		b := CommIDString([16]byte{0x43})
		got := e.Progress(1, at(10))
		want := []CommProgress{{CommState: CommState{ID: a, Rank: 0, NRanks: 2, Issued: 5, Completed: 3, LastOp: "AllReduce"}, Active: at(2), Waiting: 4, WaitSince: at(2.01)}}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("reverse %v: progress\n%+v\nwant\n%+v", reverse, got, want)
		}
		if early := e.Progress(1, at(2.5)); early[0].Waiting != 0 || early[0].WaitSince != 0 {
			t.Errorf("reverse %v: a wait of 0.49 s shown: %+v", reverse, early)
		}
		got = e.Progress(2, at(10))
		want = []CommProgress{
			{CommState: CommState{ID: a, Rank: 1, NRanks: 2}, Active: 0},
			{CommState: CommState{ID: b, Rank: 0, NRanks: 4, Issued: 1, LastOp: "AllReduce"}, Active: at(1.6), Waiting: 1, WaitSince: at(1.7)},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("reverse %v: progress\n%+v\nwant\n%+v", reverse, got, want)
		}
		w, ok := e.Awaiting(2, at(10))
		if !ok || w.Call != "cuStreamSynchronize" || w.Since != at(1.7) || w.Oldest == nil || w.Oldest.Kernel != "gemm" ||
			w.Collective == nil || w.Collective.Comm != b || w.Collective.Seq != 1 {
			t.Errorf("reverse %v: awaiting %+v %v", reverse, w, ok)
		}
		if lg := e.Laggards(at(40), 30*time.Second); len(lg) != 1 || lg[0].PID != 2 || lg[0].Comm != a || lg[0].Seq != 4 {
			t.Errorf("reverse %v: laggards %+v", reverse, lg)
		}
		if _, ok := e.Awaiting(3, at(10)); ok {
			t.Error("an unknown process awaits")
		}
	}
}

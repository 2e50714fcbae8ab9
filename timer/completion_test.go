package timer

import "testing"

func TestCompletionRules(t *testing.T) {
	const pid, tid, s1, s2, ev1, ev2 = 100, 100, 7, 8, 0xe1, 0xe2
	two := []Event{launch(0, pid, tid, s1, "a"), launch(0.1, pid, tid, s1, "b")}
	seq := func(evs ...Event) []Event { return append(append([]Event{}, two...), evs...) }
	cases := []struct {
		name    string
		evs     []Event
		pending int
	}{
		{"nothing retires by itself", seq(), 2},
		{"event query ready retires up to the record",
			seq(record(0.2, pid, tid, ev1, s1), launch(0.3, pid, tid, s1, "c"), query(0.4, pid, tid, ev1, 0)), 1},
		{"event query not ready retires nothing",
			seq(record(0.2, pid, tid, ev1, s1), query(0.4, pid, tid, ev1, RetNotReady)), 2},
		{"event query of an unknown event retires nothing", seq(query(0.4, pid, tid, ev2, 0)), 2},
		{"event synchronize success",
			seq(record(0.2, pid, tid, ev1, s1), launch(0.25, pid, tid, s1, "c"),
				enter(0.3, pid, tid, KindEventSynchronize, 0, ev1), exit(0.4, pid, tid, KindEventSynchronize, 0, ev1, 0)), 1},
		{"event synchronize failure",
			seq(record(0.2, pid, tid, ev1, s1), enter(0.3, pid, tid, KindEventSynchronize, 0, ev1),
				exit(0.4, pid, tid, KindEventSynchronize, 0, ev1, 700)), 2},
		{"event synchronize whose entry was not seen",
			seq(record(0.2, pid, tid, ev1, s1), exit(0.4, pid, tid, KindEventSynchronize, 0, ev1, 0)), 0},
		{"stream synchronize retires what was issued before its entry",
			seq(enter(0.3, pid, tid, KindStreamSynchronize, s1, 0), launch(0.35, pid, tid+1, s1, "late"),
				exit(0.4, pid, tid, KindStreamSynchronize, s1, 0, 0)), 1},
		{"stream synchronize failure",
			seq(enter(0.3, pid, tid, KindStreamSynchronize, s1, 0), exit(0.4, pid, tid, KindStreamSynchronize, s1, 0, 999)), 2},
		{"stream synchronize of another stream",
			seq(enter(0.3, pid, tid, KindStreamSynchronize, s2, 0), exit(0.4, pid, tid, KindStreamSynchronize, s2, 0, 0)), 2},
		{"stream query ready retires the stream",
			seq(Event{Time: at(0.3), PID: pid, TID: tid, Kind: KindStreamQuery, Phase: PhaseExit, Stream: s1}), 0},
		{"stream query not ready",
			seq(Event{Time: at(0.3), PID: pid, TID: tid, Kind: KindStreamQuery, Phase: PhaseExit, Stream: s1, Ret: RetNotReady}), 2},
		{"device synchronize retires every stream up to its entry",
			seq(launch(0.2, pid, tid, s2, "x"), enter(0.3, pid, tid, KindDeviceSynchronize, 0, 0),
				launch(0.35, pid, tid+1, s2, "late"), exit(0.4, pid, tid, KindDeviceSynchronize, 0, 0, 0)), 1},
		{"device synchronize failure",
			seq(enter(0.3, pid, tid, KindDeviceSynchronize, 0, 0), exit(0.4, pid, tid, KindDeviceSynchronize, 0, 0, 1)), 2},
		{"synchronous copy retires the legacy default stream only",
			seq(launch(0.2, pid, tid, 0, "on0"), enter(0.3, pid, tid, KindMemcpy, 0, 0), exit(0.4, pid, tid, KindMemcpy, 0, 0, 0)), 2},
		{"synchronous copy failure leaves the copy outstanding",
			seq(launch(0.2, pid, tid, 0, "on0"), enter(0.3, pid, tid, KindMemcpy, 0, 0), exit(0.4, pid, tid, KindMemcpy, 0, 0, 1)), 4},
		{"stream wait event: completion of the waiting stream implies the awaited work",
			seq(record(0.2, pid, tid, ev1, s1),
				Event{Time: at(0.21), PID: pid, TID: tid, Kind: KindStreamWaitEvent, Stream: s2, Handle: ev1},
				launch(0.22, pid, tid, s2, "consumer"), launch(0.23, pid, tid, s1, "after"),
				record(0.24, pid, tid, ev2, s2), query(0.5, pid, tid, ev2, 0)), 1},
		{"stream wait event: an event recorded before the wait implies nothing",
			seq(record(0.2, pid, tid, ev2, s2), record(0.21, pid, tid, ev1, s1),
				Event{Time: at(0.22), PID: pid, TID: tid, Kind: KindStreamWaitEvent, Stream: s2, Handle: ev1},
				query(0.5, pid, tid, ev2, 0)), 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newTestEngine()
			feed(e, c.evs...)
			if got := pending(t, e, pid); got != c.pending {
				t.Fatalf("pending = %d, want %d", got, c.pending)
			}
		})
	}
}

func TestEventRecordedAgainMovesItsPosition(t *testing.T) {
	e := newTestEngine()
	feed(e, launch(0, 1, 1, 5, "a"), record(0.1, 1, 1, 9, 5), launch(0.2, 1, 1, 5, "b"), record(0.3, 1, 1, 9, 5),
		query(0.4, 1, 1, 9, 0))
	if got := pending(t, e, 1); got != 0 {
		t.Fatalf("pending = %d, want 0", got)
	}
}

func TestStreamCapDropsOldest(t *testing.T) {
	e := NewEngine(Config{MaxOpsPerStream: 100})
	for i := 0; i < 250; i++ {
		e.Handle(launch(float64(i)*0.001, 1, 1, 3, "k"))
	}
	st, _ := e.State(1, at(1))
	if st.Pending != 100 || st.Dropped != 150 {
		t.Fatalf("pending %d dropped %d, want 100 and 150", st.Pending, st.Dropped)
	}
	// The oldest kept is launch 150.
	if want := at(1) - at(0.150); st.OldestAgeNs != want {
		t.Fatalf("oldest age %d, want %d", st.OldestAgeNs, want)
	}
	feed(e, Event{Time: at(2), PID: 1, TID: 1, Kind: KindStreamQuery, Phase: PhaseExit, Stream: 3})
	if got := pending(t, e, 1); got != 0 {
		t.Fatalf("pending after query = %d", got)
	}
}

func TestProcessExitReleasesState(t *testing.T) {
	e := newTestEngine()
	feed(e, launch(0, 1, 1, 3, "k"), enter(0.1, 1, 1, KindStreamSynchronize, 3, 0), launch(15, 2, 2, 3, "k"))
	if hs := e.Check(at(20)); len(hs) != 1 || hs[0].PID != 1 {
		t.Fatalf("hangs %+v, want pid 1", hs)
	}
	feed(e, Event{Time: at(21), PID: 1, Kind: KindProcessExit})
	if got := e.Processes(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("processes %v, want [2]", got)
	}
	if _, ok := e.Hung(1); ok {
		t.Fatal("exited process still hung")
	}
	if rec := e.Recovered(at(21)); len(rec) != 1 || rec[0] != 1 {
		t.Fatalf("recovered %v, want [1]", rec)
	}
	if _, ok := e.State(1, at(21)); ok {
		t.Fatal("state of exited process kept")
	}
}

func TestExecStartsAfresh(t *testing.T) {
	e := newTestEngine()
	e.SetIdentity(1, 5, 8)
	feed(e, launch(0, 1, 1, 3, "k"), enter(0.1, 1, 1, KindStreamSynchronize, 3, 0))
	if hs := e.Check(at(11)); len(hs) != 1 {
		t.Fatalf("hangs %+v", hs)
	}
	feed(e, Event{Time: at(12), PID: 1, TID: 1, Kind: KindProcessExec})
	st, ok := e.State(1, at(12))
	if !ok || st.Pending != 0 || st.Rank != 5 || st.Hung {
		t.Fatalf("state after exec %+v", st)
	}
	if rec := e.Recovered(at(12)); len(rec) != 1 {
		t.Fatalf("recovered %v", rec)
	}
}

// TestStreamWaitsBeyondTheBound makes a stream that nothing retires wait
// for another far more often than maxDeps: it keeps at most maxDeps
// waits, the newest among them, and its completion still retires what
// the newest wait awaited.
func TestStreamWaitsBeyondTheBound(t *testing.T) {
	const pid, tid, s1, s2, ev1, ev2 = 100, 100, 7, 8, 0xe1, 0xe2
	e := newTestEngine()
	for i := range 5 * maxDeps {
		tm := 0.001 * float64(i)
		feed(e, launch(tm, pid, tid, s1, "producer"), record(tm, pid, tid, ev1, s1),
			Event{Time: at(tm), PID: pid, TID: tid, Kind: KindStreamWaitEvent, Stream: s2, Handle: ev1})
		if n := len(e.procs[pid].streams[s2].deps); n > maxDeps {
			t.Fatalf("after %d waits the stream keeps %d, more than %d", i+1, n, maxDeps)
		}
	}
	feed(e, launch(6, pid, tid, s2, "consumer"), record(6, pid, tid, ev2, s2), query(7, pid, tid, ev2, 0))
	if got := pending(t, e, pid); got != 0 {
		t.Fatalf("pending = %d after the waiting stream completed, want 0 (the newest wait implies every producer)", got)
	}
}

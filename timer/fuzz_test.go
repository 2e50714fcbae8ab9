package timer

import (
	"reflect"
	"slices"
	"testing"
	"time"
)

// decodeEvents turns fuzz bytes into a time-ordered event sequence: six
// bytes an event (kind, pid, tid, stream, handle, flags).
func decodeEvents(data []byte) []Event {
	var evs []Event
	t := int64(0)
	for len(data) >= 6 {
		b := data[:6]
		data = data[6:]
		t += int64(b[5]>>3) * int64(500*time.Millisecond)
		ev := Event{
			Time:   t,
			Kind:   Kind(b[0] % uint8(kindCount)),
			PID:    1 + int(b[1]%3),
			TID:    1 + int(b[2]%4),
			Stream: uint64(b[3] % 4),
			Handle: uint64(b[4] % 8),
			Phase:  Phase(b[5] & 1),
			Vendor: Vendor(b[1] >> 7),
		}
		switch (b[5] >> 1) & 3 {
		case 1:
			ev.Ret = RetNotReady
		case 2:
			ev.Ret = 1
		}
		ev.Handle2 = uint64(b[3] % 8)
		ev.Comm = uint64(b[2] % 3)
		ev.CommID[0] = b[2] % 2
		ev.NRanks, ev.Rank = 2, int32(b[1]%2)
		ev.Op = CollOp(b[4] % uint8(collOpCount+1))
		ev.Count, ev.Dtype = uint64(b[3]), int32(b[4]%13)
		ev.ElapsedMs = float32(b[0])
		if ev.Kind == KindLaunch {
			ev.Kernel = []string{"", "gemm", "ln"}[b[4]%3]
			ev.Func = uint64(b[4])
		}
		evs = append(evs, ev)
	}
	return evs
}

func checkInvariants(t *testing.T, e *Engine) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for pid, p := range e.procs {
		n := 0
		for _, s := range p.streams {
			n += s.q.n
			if s.done > s.next {
				t.Fatalf("pid %d stream %d: done %d beyond next %d", pid, s.id, s.done, s.next)
			}
			for i := 0; i < s.q.n; i++ {
				if s.q.at(i).pos < s.done {
					t.Fatalf("pid %d stream %d: completed op still queued", pid, s.id)
				}
			}
		}
		if p.pending < 0 || n != p.pending {
			t.Fatalf("pid %d: pending %d, queued %d", pid, p.pending, n)
		}
	}
}

func FuzzHandle(f *testing.F) {
	f.Add([]byte{1, 0, 0, 1, 0, 8, 5, 0, 0, 1, 1, 8, 8, 0, 0, 1, 0, 0, 8, 0, 0, 1, 0, 255})
	f.Add([]byte{15, 0, 0, 1, 0, 8, 13, 0, 0, 0, 0, 1, 15, 1, 1, 1, 0, 8, 8, 1, 1, 1, 0, 0, 5, 0, 0, 1, 1, 0, 6, 0, 0, 0, 1, 255})
	f.Add([]byte{4, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 241, 10, 0, 0, 2, 1, 0, 1, 0, 0, 2, 0, 8, 5, 0, 0, 2, 2, 0, 9, 0, 0, 2, 2, 255})
	f.Add([]byte{11, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 8, 11, 0, 0, 0, 0, 1, 19, 0, 0, 0, 0, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		e := NewEngine(Config{HangTimeout: time.Second, MaxOpsPerStream: 8})
		var now int64
		for i, ev := range decodeEvents(data) {
			e.Handle(ev)
			now = ev.Time
			checkInvariants(t, e)
			if i%5 != 4 {
				continue
			}
			e.Check(now)
			before := map[int]Hang{}
			for _, pid := range e.Processes() {
				if h, ok := e.Hung(pid); ok {
					before[pid] = h
				}
			}
			if again := e.Check(now); len(again) != 0 {
				t.Fatalf("second Check at %d fired %+v", now, again)
			}
			for _, pid := range e.Processes() {
				h, ok := e.Hung(pid)
				if b, was := before[pid]; ok != was || (ok && !reflect.DeepEqual(h, b)) {
					t.Fatalf("pid %d decision changed on a repeated Check", pid)
				}
				if st, _ := e.State(pid, now); st.Pending < 0 || st.OldestAgeNs < 0 {
					t.Fatalf("state %+v", st)
				}
			}
			e.Recovered(now)
			_ = e.Stats()
		}
	})
}

// FuzzHandleAll feeds one event sequence to an engine one by one and to
// another in batches (the tracer's way): their state and decisions must
// be the same.
func FuzzHandleAll(f *testing.F) {
	f.Add([]byte{1, 0, 0, 1, 0, 8, 5, 0, 0, 1, 1, 8, 8, 0, 0, 1, 0, 0, 8, 0, 0, 1, 0, 255}, uint8(2))
	f.Add([]byte{15, 0, 0, 1, 0, 8, 13, 0, 0, 0, 0, 1, 15, 1, 1, 1, 0, 8, 8, 1, 1, 1, 0, 0, 5, 0, 0, 1, 1, 0, 6, 0, 0, 0, 1, 255}, uint8(3))
	f.Add([]byte{4, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0, 241, 10, 0, 0, 2, 1, 0, 1, 0, 0, 2, 0, 8, 5, 0, 0, 2, 2, 0, 9, 0, 0, 2, 2, 255}, uint8(4))
	f.Fuzz(func(t *testing.T, data []byte, batch uint8) {
		cfg := Config{HangTimeout: time.Second, MaxOpsPerStream: 8}
		one, all := NewEngine(cfg), NewEngine(cfg)
		evs := decodeEvents(data)
		n := 1 + int(batch%16)
		var now int64
		for i := 0; i < len(evs); i += n {
			b := evs[i:min(i+n, len(evs))]
			for _, ev := range b {
				one.Handle(ev)
			}
			all.HandleAll(slices.Clone(b))
			now = b[len(b)-1].Time
			if h1, h2 := one.Check(now), all.Check(now); !reflect.DeepEqual(h1, h2) {
				t.Fatalf("at %d one by one decided %+v, in batches %+v", now, h1, h2)
			}
		}
		if !reflect.DeepEqual(one.procs, all.procs) || !reflect.DeepEqual(one.Recovered(now), all.Recovered(now)) {
			t.Fatal("one by one and in batches, the engines differ")
		}
	})
}

package timer

import (
	"testing"
	"time"
)

// looker feeds looks of several ranks at one-second ticks.
type looker struct {
	e   *Engine
	now int64
}

func newLooker(timeout time.Duration) *looker {
	return &looker{e: NewEngine(Config{HangTimeout: timeout}), now: 100 * sec}
}

// asleep is a look at a main thread asleep at site, gone to sleep sleeps
// times so far, last run at lastRan.
func asleep(pid int, sleeps uint64, site string, lastRan int64) Look {
	return Look{PID: pid, State: 'S', Sleeps: sleeps, Site: site, LastRan: lastRan}
}

// running is a look at a main thread that ran cpu ns so far in frames py.
func running(pid int, sleeps uint64, cpu int64, py string) Look {
	return Look{PID: pid, State: 'R', Sleeps: sleeps, CPU: cpu, Python: py}
}

// tick advances one second, passes looks (their Time set) and checks.
func (l *looker) tick(looks ...Look) []Hang {
	l.now += sec
	for _, k := range looks {
		k.Time = l.now
		l.e.Observe(k)
	}
	return l.e.Check(l.now)
}

func kinds(hs []Hang) map[int]HangKind {
	m := map[int]HangKind{}
	for _, h := range hs {
		m[h.PID] = h.Kind
	}
	return m
}

// Ranks asleep in place past the timeout while no peer progresses are
// stalled, no earlier than the timeout after they went to sleep.
func TestStalledAllAsleep(t *testing.T) {
	l := newLooker(5 * time.Second)
	wentToSleep := l.now - 2*sec // before the first look
	var fired map[int]HangKind
	firedAt := int64(0)
	for i := 0; i < 10 && fired == nil; i++ {
		hs := l.tick(asleep(1, 7, "futex A", wentToSleep), asleep(2, 9, "futex B", wentToSleep), asleep(3, 4, "nanosleep", wentToSleep))
		if len(hs) > 0 {
			fired, firedAt = kinds(hs), l.now
		}
	}
	if len(fired) != 3 || fired[1] != "stalled" || fired[3] != "stalled" {
		t.Fatalf("decisions %v", fired)
	}
	if age := firedAt - wentToSleep; age <= 5*sec || age > 6*sec {
		t.Errorf("fired %v after the sleep began, want just past the 5 s timeout", time.Duration(age))
	}
	h, _ := l.e.Hung(3)
	if h.Stall == nil || h.Stall.Site != "nanosleep" || h.Stall.Spinning || h.AgeNs <= 5*sec {
		t.Errorf("decision %+v stall %+v", h, h.Stall)
	}
}

// Without LastRan, the period starts at the first look that saw the sleep.
func TestStalledWithoutLastRan(t *testing.T) {
	l := newLooker(3 * time.Second)
	first := l.now + sec
	for i := 0; i < 10; i++ {
		if hs := l.tick(asleep(1, 7, "futex", 0), asleep(2, 9, "futex", 0)); len(hs) > 0 {
			if l.now-first <= 3*sec {
				t.Fatalf("fired %v after the first look", time.Duration(l.now-first))
			}
			return
		}
	}
	t.Fatal("never fired")
}

// A rank that finished and waits while its peers still progress is not
// stalled, however long it waits.
func TestNotStalledWhilePeersProgress(t *testing.T) {
	l := newLooker(3 * time.Second)
	for i := 0; i < 20; i++ {
		n := uint64(i)
		py := []string{"forward@train.py", "backward@train.py", "step@train.py"}[i%3]
		hs := l.tick(asleep(1, 5, "barrier", l.now-10*sec), asleep(2, 10+n, "futex", l.now), running(3, 20+n, int64(i)*sec/2, py))
		if len(hs) > 0 {
			t.Fatalf("tick %d: %+v", i, hs)
		}
	}
}

// A wait shorter than the timeout (a long checkpoint write) raises nothing,
// and a decided stall clears when the thread progresses again.
func TestShortWaitAndRecovery(t *testing.T) {
	l := newLooker(5 * time.Second)
	for i := 0; i < 4; i++ {
		if hs := l.tick(asleep(1, 3, "write", l.now-sec), asleep(2, 3, "futex", l.now-sec)); len(hs) > 0 {
			t.Fatalf("short wait fired: %+v", hs)
		}
	}
	for i := 0; i < 3; i++ { // progress: both run again
		l.tick(running(1, uint64(10+i), 0, ""), running(2, uint64(10+i), 0, ""))
	}
	var hs []Hang
	for i := 0; i < 8 && len(hs) == 0; i++ {
		hs = l.tick(asleep(1, 20, "futex", 0), asleep(2, 20, "futex", 0))
	}
	if len(hs) != 2 {
		t.Fatalf("no stall after a long wait: %+v", hs)
	}
	l.tick(running(1, 30, 0, ""), asleep(2, 20, "futex", 0))
	if rec := l.e.Recovered(l.now); len(rec) != 1 || rec[0] != 1 {
		t.Errorf("recovered %v, want [1]", rec)
	}
}

// A rank spinning in the same Python frames while its peers sleep in place
// is the culprit: "host", spinning; the peers are "stalled".
func TestSpinningCulprit(t *testing.T) {
	l := newLooker(3 * time.Second)
	var got map[int]HangKind
	for i := 0; i < 10; i++ {
		hs := l.tick(asleep(1, 5, "allreduce", l.now-sec), running(2, uint64(100+i), int64(i)*sec, "busy@job.py;main@job.py"), asleep(3, 6, "allreduce", l.now-sec))
		for pid, k := range kinds(hs) {
			if got == nil {
				got = map[int]HangKind{}
			}
			got[pid] = k
		}
	}
	if got[1] != "stalled" || got[3] != "stalled" || got[2] != "host" {
		t.Fatalf("decisions %v", got)
	}
	if h, _ := l.e.Hung(2); h.Stall == nil || !h.Stall.Spinning || h.Stall.Python != "busy@job.py;main@job.py" {
		t.Errorf("spinner %+v", h.Stall)
	}
}

// Ranks that all compute in one Python function for longer than the
// timeout are busy, not hung; so are ranks whose frames change.
func TestAllSpinningIsBusy(t *testing.T) {
	l := newLooker(3 * time.Second)
	for i := 0; i < 10; i++ {
		c := int64(i) * sec
		if hs := l.tick(running(1, uint64(i), c, "preprocess@data.py"), running(2, uint64(i), c, "preprocess@data.py")); len(hs) > 0 {
			t.Fatalf("tick %d: %+v", i, hs)
		}
	}
	l2 := newLooker(3 * time.Second)
	for i := 0; i < 10; i++ {
		py := "forward@model.py"
		if i%2 == 1 {
			py = "backward@model.py"
		}
		if hs := l2.tick(asleep(1, 5, "allreduce", 1), running(2, uint64(i), int64(i)*sec, py)); len(hs) > 0 {
			t.Fatalf("changing frames, tick %d: %+v", i, hs)
		}
	}
}

// GPU work issued after the sleep began moves the start forward; a rank
// with a thread waiting on the GPU is the "gpu" rule's, not this one's.
func TestStalledRespectsGPUWork(t *testing.T) {
	l := newLooker(3 * time.Second)
	slept := l.now - 10*sec
	l.e.Handle(Event{Kind: KindLaunch, PID: 1, TID: 1, Time: l.now, Stream: 7, Kernel: "k"})
	l.e.Handle(Event{Kind: KindStreamSynchronize, PID: 1, TID: 1, Time: l.now, Stream: 7})
	for i := 0; i < 2; i++ {
		if hs := l.tick(asleep(1, 5, "ioctl", slept), asleep(2, 5, "futex", slept)); kinds(hs)[1] != "" {
			t.Fatalf("waiter on the GPU decided by looks: %+v", hs)
		}
	}
}

// A silent rank whose peer waits on the GPU, not yet past the timeout, is
// left to the "host" rule: decided "host" once the peer is stuck.
func TestStalledYieldsToHostRule(t *testing.T) {
	l := newLooker(3 * time.Second)
	comm := [16]byte{1}
	for pid := 1; pid <= 2; pid++ {
		l.e.Handle(Event{Kind: KindCommInit, PID: pid, TID: pid, Time: l.now, Handle: 0xc, CommID: comm, NRanks: 2, Rank: int32(pid - 1)})
	}
	slept := l.now // rank 1 stops before its collective; rank 2 issues it and waits
	l.e.Handle(Event{Kind: KindCollective, PID: 2, TID: 2, Time: l.now + sec/2, Stream: 7, Handle: 0xc, Op: OpAllReduce, Count: 1, Dtype: 7})
	l.e.Handle(Event{Kind: KindStreamSynchronize, PID: 2, TID: 2, Time: l.now + sec/2, Stream: 7})
	var got map[int]HangKind
	for i := 0; i < 8 && got == nil; i++ {
		if hs := l.tick(asleep(1, 5, "sleep", slept), asleep(2, 5, "ioctl", slept)); len(hs) > 0 {
			got = kinds(hs)
		}
	}
	if got[1] != "host" || got[2] != "gpu" {
		t.Fatalf("decisions %v, want rank 1 host and rank 2 gpu", got)
	}
}

// A finished rank waits for long while its peers, still training, are
// caught asleep in a collective at every other look: not stalled.
func TestNotStalledWhilePeersWaitBriefly(t *testing.T) {
	l := newLooker(3 * time.Second)
	for i := 0; i < 20; i++ {
		n := uint64(i / 2) // sleeps change every other look: two looks in one brief wait
		hs := l.tick(asleep(1, 5, "barrier", 50*sec), asleep(2, 10+n, "allreduce", l.now-sec/2), asleep(3, 30+n, "allreduce", l.now-sec/2))
		if len(hs) > 0 {
			t.Fatalf("tick %d: %+v", i, hs)
		}
	}
}

// A process first known from looks counts its GPU silence from its first
// event: the "host" age is not inflated by the looks before it.
func TestLookedFirstHostAge(t *testing.T) {
	l := newLooker(3 * time.Second)
	for i := 0; i < 10; i++ { // startup: both looked at, running, frames changing
		l.tick(running(1, uint64(i), 0, ""), running(2, uint64(i), 0, ""))
	}
	comm := [16]byte{1}
	start := l.now
	for pid := 1; pid <= 2; pid++ {
		l.e.Handle(Event{Kind: KindCommInit, PID: pid, TID: pid, Time: start, Handle: 0xc, CommID: comm, NRanks: 2, Rank: int32(pid - 1)})
	}
	l.e.Handle(Event{Kind: KindCollective, PID: 2, TID: 2, Time: start, Stream: 7, Handle: 0xc, Op: OpAllReduce, Count: 1, Dtype: 7})
	l.e.Handle(Event{Kind: KindStreamSynchronize, PID: 2, TID: 2, Time: start, Stream: 7})
	for i := 0; i < 6; i++ {
		for _, h := range l.tick(asleep(1, 50, "futex", start), asleep(2, 50, "ioctl", start)) {
			if h.PID == 1 && (h.Kind != "host" || h.AgeNs > 5*sec) {
				t.Fatalf("decision %+v: age counted from before the first event", h)
			}
		}
	}
	if _, ok := l.e.Hung(1); !ok {
		t.Fatal("rank 1 never decided")
	}
}

// A lone process that sleeps, then computes, each longer than the
// timeout, is not stalled: nothing waits for it.
func TestLoneProcessNotStalled(t *testing.T) {
	l := newLooker(time.Second)
	for i := 0; i < 5; i++ {
		if hs := l.tick(asleep(1, 5, "nanosleep", 1)); len(hs) > 0 {
			t.Fatalf("lone sleeper decided: %+v", hs)
		}
	}
	for i := 0; i < 5; i++ {
		if hs := l.tick(running(1, uint64(10+i), int64(i)*sec, "busy@idle.py")); len(hs) > 0 {
			t.Fatalf("lone spinner decided: %+v", hs)
		}
	}
}

// A straggler in a loop of sleeps for time alone at one place (`while
// True: time.sleep(1)`) wakes every second, yet makes no progress: with
// its peers asleep in place it is stalled a timeout after the first look,
// however early in its sleep each look finds it. A thread that wakes as
// often in a futex at one place (a healthy loop that waits on a queue,
// caught there at each look) progresses, and so does one found at each
// look in the same timed sleep that went to sleep 230 times a second (a
// rank that rests 30-45 ms after each step: a healthy CPU torch job's
// rank 0 slept 455 times in 38 steps of 2 s).
func TestSleepLoopIsNoProgress(t *testing.T) {
	// Python 3.11's time.sleep, as /proc/PID/syscall showed it at two
	// turns of the loop: its stack addresses change, its call does not.
	nanosleep := []string{"230 0x1 0x1 0x7ffcf5c32290 0x0 0x0 0x0 0x7ffcf5c32250 0x7f10964ed545",
		"230 0x1 0x1 0x7ffcf5c322e0 0x0 0x0 0x0 0x7ffcf5c322a0 0x7f10964ed545"}
	const futex = "202 0x7f0c1c0008e0 0x189 0x0 0x0 0x0 0xffffffff 0x7ffc3ad1e478 0x7f0c1e8e4b4a"
	timed := func(sleeps uint64, lastRan int64) Look {
		l := asleep(1, sleeps, nanosleep[sleeps%2], lastRan)
		l.Timed = true
		return l
	}
	const ms = int64(time.Millisecond)
	for _, c := range []struct {
		name string
		// look is the straggler's i-th look, at now (its Time)
		look  func(i uint64, now int64) Look
		stall bool
	}{
		{"timed sleep", func(i uint64, now int64) Look { return timed(10+i, now-sec/2) }, true},
		{"timed sleep, each look just after it began", func(i uint64, now int64) Look { return timed(10+i, now-ms) }, true},
		{"timed sleep, no last run known", func(i uint64, now int64) Look { return timed(10+i, 0) }, true},
		{"futex", func(i uint64, now int64) Look { return asleep(1, 10+i, futex, now-sec/2) }, false},
		{"timed sleep between steps", func(i uint64, now int64) Look { return timed(10+230*i, now-30*ms) }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := newLooker(3 * time.Second)
			first := l.now + sec
			var at int64
			for i := uint64(0); i < 10 && at == 0; i++ {
				hs := l.tick(c.look(i, l.now+sec), asleep(2, 5, "barrier", first-10*sec))
				if kinds(hs)[1] == HangStalled {
					at = l.now
				}
			}
			switch {
			case c.stall && (at == 0 || at-first < 3*sec || at-first > 4*sec):
				t.Fatalf("stalled at %v after the first look, want within a check of the 3 s timeout past its last run before", time.Duration(at-first))
			case !c.stall && at != 0:
				t.Fatalf("stalled %v after the first look: it wakes and sleeps more often than a loop of sleeps alone", time.Duration(at-first))
			}
		})
	}
}

// A capture (a dump, the early warning's sample) stops every thread as a
// native sample does, putting a sleeping one to sleep twice: told of it
// (Stopped), the looks take those sleeps for no progress, and the ranks
// are stalled a timeout after they went to sleep; not told, each capture
// is progress and postpones the decision. Run with the two ranks looked
// at in both orders.
func TestCaptureIsNoProgress(t *testing.T) {
	for _, told := range []bool{true, false} {
		for _, order := range [][]int{{1, 2}, {2, 1}} {
			l := newLooker(5 * time.Second)
			wentToSleep := l.now
			sleeps := map[int]uint64{1: 7, 2: 9}
			var firedAt int64
			for i := 0; i < 20 && firedAt == 0; i++ {
				var looks []Look
				for _, pid := range order {
					looks = append(looks, asleep(pid, sleeps[pid], "futex", wentToSleep))
				}
				if len(l.tick(looks...)) > 0 {
					firedAt = l.now
				}
				if i%2 == 1 { // rank 1 captured at every other check
					sleeps[1] += 2
					if told {
						l.e.Stopped(1)
					}
				}
			}
			age := time.Duration(firedAt - wentToSleep)
			if told && (firedAt == 0 || age > 6*time.Second) {
				t.Errorf("told, order %v: decided %v after the sleep began (0: never), want just past the 5 s timeout", order, age)
			}
			if !told && firedAt != 0 {
				t.Errorf("not told, order %v: decided %v after the sleep began: the captures read as no progress regardless, the check proves nothing", order, age)
			}
		}
	}
	e := NewEngine(Config{})
	if e.Stopped(42); len(e.Processes()) != 0 {
		t.Errorf("a stop of an unknown pid made processes %v", e.Processes())
	}
}

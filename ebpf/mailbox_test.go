package ebpf

import (
	"slices"
	"testing"
)

// The rules of merge, one row per pair: what the follower must do for a
// process whose record a came, then b, both in the backlog.
func TestMergeRecords(t *testing.T) {
	ev := func(k procKind, held bool) procEvent { return procEvent{kind: k, pid: 7, held: held} }
	exitThen := func(k procKind, held bool) procEvent { e := ev(k, held); e.exited = true; return e }
	for _, c := range []struct {
		name string
		a, b procEvent
		want procEvent
	}{
		{"a load after a fork: the fork's scan covers it", ev(procFork, false), ev(procMmap, true), ev(procFork, true)},
		{"a load after an exec: the exec's scan covers it", ev(procExec, true), ev(procMmap, false), ev(procExec, true)},
		{"two loads: one scan", ev(procMmap, false), ev(procMmap, true), ev(procMmap, true)},
		{"an exit ends a fork", ev(procFork, true), ev(procExit, false), ev(procExit, true)},
		{"an exit ends a load", ev(procMmap, false), ev(procExit, false), ev(procExit, false)},
		{"an exec after a load: a new image", ev(procMmap, false), ev(procExec, false), ev(procExec, false)},
		{"a fork after an exit: the pid reused, the exit first", ev(procExit, false), ev(procFork, false), exitThen(procFork, false)},
		{"an exec after an exit: the pid reused", ev(procExit, false), ev(procExec, true), exitThen(procExec, true)},
		{"a load after a reused pid's fork keeps the exit", exitThen(procFork, false), ev(procMmap, false), exitThen(procFork, false)},
		{"an exit after a reused pid's fork: only the exit", exitThen(procFork, false), ev(procExit, false), ev(procExit, false)},
	} {
		if got := c.a.merge(c.b); got != c.want {
			t.Errorf("%s: %+v then %+v merge to %+v, want %+v", c.name, c.a, c.b, got, c.want)
		}
	}
}

// Posting never blocks: beyond the queue, records go to the backlog,
// merged per process and counted, and stay there until the follower has
// taken the queue, so that each process's records are handled in order;
// then posting goes to the queue again.
func TestMailboxOverflow(t *testing.T) {
	m := newMailbox()
	for i := range inboxLen {
		m.post(procEvent{kind: procMmap, pid: 1000 + i%100})
	}
	if m.over.Load() || m.coalesced.Load() != 0 {
		t.Fatal("the backlog used while the queue had room")
	}
	m.post(procEvent{kind: procFork, pid: 1})
	m.post(procEvent{kind: procMmap, pid: 1, held: true})
	m.post(procEvent{kind: procExit, pid: 2})
	m.post(procEvent{kind: procExit, pid: 1})
	if got := m.coalesced.Load(); got != 2 {
		t.Errorf("%d records coalesced, want 2", got)
	}
	if m.idle() {
		t.Error("idle with records posted")
	}
	if b := m.takeBacklog(); b != nil {
		t.Fatalf("the backlog taken before the queue: %+v", b)
	}
	for range inboxLen {
		<-m.queue
	}
	m.post(procEvent{kind: procFork, pid: 3}) // while the backlog waits: after it
	b := m.takeBacklog()
	want := []procEvent{{kind: procExit, pid: 1, held: true}, {kind: procExit, pid: 2}, {kind: procFork, pid: 3}}
	if !slices.Equal(b, want) {
		t.Errorf("backlog %+v, want %+v", b, want)
	}
	if !m.idle() {
		t.Error("not idle with everything taken")
	}
	m.post(procEvent{kind: procFork, pid: 4})
	if len(m.queue) != 1 {
		t.Error("posting did not go back to the queue")
	}
}

// Notices wait for the reader, bounded, and each tells it at once.
func TestMailboxNotices(t *testing.T) {
	m := newMailbox()
	told := 0
	m.notify = func() { told++ }
	for range maxNotices + 10 {
		m.notice(Notice{Kind: NoticeExit})
	}
	if !m.hasNotices() || told != maxNotices+10 {
		t.Fatalf("notices waiting %v, told %d", m.hasNotices(), told)
	}
	if n := len(m.takeNotices()); n != maxNotices {
		t.Errorf("%d notices, want %d", n, maxNotices)
	}
	if m.hasNotices() {
		t.Error("notices left after the take")
	}
}

// The lookups' news merge until taken: a name learned or a handle never
// named stays news, the pending count and the time are the latest.
func TestMailboxNews(t *testing.T) {
	m := newMailbox()
	if _, at := m.takeNews(); at != 0 {
		t.Fatal("news before any")
	}
	m.postNews(lookupNews{learned: true, pending: 3}, 10)
	m.postNews(lookupNews{unnamed: true, pending: 1}, 20)
	n, at := m.takeNews()
	if want := (lookupNews{learned: true, unnamed: true, pending: 1}); n != want || at != 20 {
		t.Errorf("news %+v at %d, want %+v at 20", n, at, want)
	}
	if _, at := m.takeNews(); at != 0 {
		t.Error("news taken twice")
	}
}

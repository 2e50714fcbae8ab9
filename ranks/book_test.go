package ranks

import (
	"fmt"
	"slices"
	"testing"

	"github.com/xpu-timer/xpu-timer/ranks/identity"
)

// env is the environment torchrun gives rank of world.
func env(rank, world int) map[string]string {
	return map[string]string{"RANK": fmt.Sprint(rank), "LOCAL_RANK": fmt.Sprint(rank), "WORLD_SIZE": fmt.Sprint(world),
		"LOCAL_WORLD_SIZE": fmt.Sprint(world), "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
}

// look is the look the book asks for at pid, unread.
func look(b *Book, pid int) Look {
	for _, l := range b.Unread() {
		if l.PID == pid {
			return l
		}
	}
	panic(fmt.Sprintf("no look asked for at %d", pid))
}

// Exited processes are remembered up to a bound, their parents kept while
// a remembered process names them.
func TestExitedProcessesBounded(t *testing.T) {
	bk := NewBook()
	bk.See(1, false, true)
	bk.Forked(2, 1)
	bk.Exit(1) // the parent of all, the first to exit: kept while they name it
	for pid := 3; pid < 3+2*maxExited; pid++ {
		bk.Forked(pid, 1)
		bk.See(pid, false, true)
		bk.Exit(pid)
	}
	if n := len(bk.procs); n > maxExited+2 {
		t.Fatalf("%d processes remembered, want at most %d", n, maxExited+2)
	}
	if bk.procs[1] == nil || bk.procs[2] == nil {
		t.Fatalf("lost the live process or the parent it names")
	}
}

// Without TORCHELASTIC_RESTART_COUNT (mpirun, Slurm, a shell loop) the
// book counts a job's restarts: a rank taken by a new process after its
// holder exited starts the next incarnation, once for all the ranks that
// come back; a wrapper and its python, a rank's workers (even one looked
// at after the rank exited) share its incarnation; a launcher's count is
// kept as it is.
func TestIncarnationCounted(t *testing.T) {
	bk := NewBook()
	start := func(pid, parent int, e map[string]string, python bool) identity.Identity {
		t.Helper()
		bk.Forked(pid, parent)
		bk.See(pid, false, true)
		id, ok := bk.Resolved(look(bk, pid), Facts{Env: e, PPID: parent, Python: python})
		if !ok {
			t.Fatalf("process %d unknown", pid)
		}
		return id
	}
	want := func(what string, id identity.Identity, inc int) {
		t.Helper()
		if id.Incarnation != inc {
			t.Errorf("%s: incarnation %d, want %d", what, id.Incarnation, inc)
		}
	}
	// Incarnation 0: rank 0 under a shell, rank 1, a worker of rank 1.
	want("shell of rank 0", start(10, 1, env(0, 2), false), 0)
	want("rank 0", start(11, 10, env(0, 2), true), 0)
	want("rank 1", start(12, 1, env(1, 2), true), 0)
	want("worker of rank 1", start(13, 12, env(1, 2), true), 0)
	for _, pid := range []int{11, 12, 10, 13} {
		bk.Exit(pid)
	}
	// Incarnation 1: both ranks come back; one restart, counted once.
	want("rank 0 again", start(21, 1, env(0, 2), true), 1)
	want("rank 1 again", start(22, 1, env(1, 2), true), 1)
	// A worker rank 1 forked just before it exited, looked at late.
	bk.Forked(23, 22)
	bk.Exit(22)
	bk.See(23, false, true)
	id, _ := bk.Resolved(look(bk, 23), Facts{Env: env(1, 2), PPID: 1, Python: true})
	want("late worker of the exited rank 1", id, 1)
	if got := bk.Helpers(22); len(got) != 1 || got[0] != 23 {
		t.Errorf("helpers of the exited rank: %v, want the late worker", got)
	}
	if live := bk.Live(); slices.Contains(live, 23) {
		t.Errorf("the late worker of the exited rank is a rank: %v", live)
	}
	// Incarnation 2: rank 1 alone restarts (its peer lives on).
	bk.Exit(23)
	want("rank 1 a third time", start(32, 1, env(1, 2), true), 2)
	// Another job has its own count.
	other := env(0, 1)
	other["MASTER_PORT"] = "29600"
	want("another job", start(40, 1, other, true), 0)
	// The launcher's count wins.
	tr := env(0, 2)
	tr["TORCHELASTIC_RESTART_COUNT"] = "5"
	bk.Exit(21)
	want("torchrun's count", start(51, 1, tr, true), 5)
}

package python

import (
	"reflect"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
)

// countingMemory counts the reads made of the target's memory.
type countingMemory struct {
	memory
	reads int
}

func (m *countingMemory) read(addr uint64, buf []byte) error {
	m.reads++
	return m.memory.read(addr, buf)
}

func (m *countingMemory) readPartial(addr uint64, buf []byte) (int, error) {
	m.reads++
	return m.memory.readPartial(addr, buf)
}

// Walk, what a dump reads while the target is stopped, reads frames and
// the headers of their code objects; Finish, after, the rest, and the two
// give what Threads gives. On a second walk the code objects are known and
// Finish reads none of them.
func TestWalkThenFinish(t *testing.T) {
	privileged.Root(t)
	forEachInterpreter(t, func(t *testing.T, py interpreter) {
		cmd, _ := startTarget(t, py)
		want, err := mustOpen(t, cmd.Process.Pid).Threads()
		if err != nil {
			t.Fatal(err)
		}
		r := mustOpen(t, cmd.Process.Pid)
		mem := &countingMemory{memory: r.mem}
		r.mem = mem
		for pass := range 2 {
			mem.reads = 0
			got, err := r.Walk()
			if err != nil {
				t.Fatalf("Walk: %v", err)
			}
			walked := mem.reads
			frames := 0
			codes := map[uint64]bool{}
			for _, th := range got {
				for i, f := range th.Frames {
					frames++
					if f.Func != "" || f.File != "" || f.Line != 0 {
						t.Fatalf("Walk named a frame: %+v", f)
					}
					codes[th.codes[i].addr] = true
				}
			}
			mem.reads = 0
			if err := r.Finish(got); err != nil {
				t.Fatalf("Finish: %v", err)
			}
			finished := mem.reads
			t.Logf("pass %d: %d frames of %d code objects; Walk made %d reads, Finish %d", pass, frames, len(codes), walked, finished)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("pass %d: Walk and Finish give\n%+v\nThreads gives\n%+v", pass, got, want)
			}
			if frames == 0 {
				t.Fatal("no frames")
			}
			// Three reads a new code object (file, name, line table),
			// and on 3.9 and 3.10 one a thread for its TID.
			if pass == 0 && finished < 3*len(codes) {
				t.Errorf("a first Finish made %d reads for %d code objects: they were read while stopped", finished, len(codes))
			}
			if pass == 1 && finished > len(got) {
				t.Errorf("a second Finish made %d reads for %d threads: known code objects were read again", finished, len(got))
			}
		}
	})
}

// A code object that cannot be read once the threads went on (freed
// meanwhile) cuts its thread's frames there, says why, and leaves the
// cache.
func TestFinishUnreadableCode(t *testing.T) {
	privileged.Root(t)
	cmd, _ := startTarget(t, interpreters[len(interpreters)-1])
	r := mustOpen(t, cmd.Process.Pid)
	ts, err := r.Walk()
	if err != nil {
		t.Fatal(err)
	}
	var th *Thread
	for i := range ts {
		if len(ts[i].Frames) >= 2 && (th == nil || len(ts[i].Frames) > len(th.Frames)) {
			th = &ts[i]
		}
	}
	if th == nil {
		t.Fatal("no thread with two frames")
	}
	// The second frame's code object: its file name now points nowhere.
	fc := th.codes[1]
	if fc.ci.decoded {
		t.Fatal("a first walk found a decoded code object")
	}
	other := 0 // the frames of the same code object elsewhere are cut too
	for _, c := range th.codes[:1] {
		if c.ci == fc.ci {
			other++
		}
	}
	fc.ci.refs[0] = 0x8
	if err := r.Finish(ts); err != nil {
		t.Fatal(err)
	}
	if other == 0 && len(th.Frames) != 1 {
		t.Errorf("%d frames, want the first alone: %+v", len(th.Frames), th.Frames)
	}
	if !strings.Contains(th.Error, "co_filename") {
		t.Errorf("error %q does not say which read failed", th.Error)
	}
	if _, ok := r.codes[fc.addr]; ok {
		t.Error("the unreadable code object stayed in the cache")
	}
	if len(th.Frames) > 0 && th.Frames[0].Func == "" {
		t.Errorf("the first frame is not named: %+v", th.Frames[0])
	}
}

func mustOpen(t *testing.T, pid int) *Reader {
	t.Helper()
	r, err := Open(pid)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return r
}

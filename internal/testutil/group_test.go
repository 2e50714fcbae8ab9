package testutil

import (
	"errors"
	"os/exec"
	"testing"
	"time"
)

func TestGroupLinesAndExit(t *testing.T) {
	var seen []string
	g, err := StartGroup(exec.Command("sh", "-c", "echo out; echo err >&2; exit 3"), func(l Line) { seen = append(seen, l.Text) })
	if err != nil {
		t.Fatal(err)
	}
	<-g.Done()
	if done, code := g.Exited(); !done || code != 3 {
		t.Errorf("exited %v with %d, want 3", done, code)
	}
	ls := g.Lines(0)
	if len(ls) != 2 || len(seen) != 2 {
		t.Fatalf("lines %+v, seen %v", ls, seen)
	}
	for _, l := range ls {
		if (l.Text == "err") != l.Stderr || l.At.IsZero() {
			t.Errorf("line %+v", l)
		}
	}
	if got := g.Lines(1); len(got) != 1 || got[0] != ls[1] {
		t.Errorf("Lines(1) = %+v", got)
	}
	if err := g.Until(time.Minute, func() bool { return false }); !errors.Is(err, ErrExited) {
		t.Errorf("Until after exit: %v", err)
	}
	if err := g.Until(time.Minute, func() bool { return true }); err != nil {
		t.Errorf("Until of a true condition: %v", err)
	}
}

func TestGroupKillAndTimeout(t *testing.T) {
	g, err := StartGroup(exec.Command("sh", "-c", "sleep 1000 & wait"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Until(time.Millisecond, func() bool { return false }); !errors.Is(err, ErrTimeout) {
		t.Errorf("Until: %v, want ErrTimeout", err)
	}
	g.Kill()
	<-g.Done()
	if _, code := g.Exited(); code != 128+9 {
		t.Errorf("killed group exited with %d, want 137", code)
	}
}

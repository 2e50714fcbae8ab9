package gate

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// A held command has run nothing of its own: it stays at its exec (state
// t, its new image's name already in place) until Open, then runs to its
// end as usual; its output and exit status are untouched.
func TestStartHeldThenOpen(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	var stdout bytes.Buffer
	cmd, g, err := Start(func() *exec.Cmd {
		c := exec.Command("sh", "-c", "echo ran > "+out+"; echo hello; exit 3")
		c.Stdout = &stdout
		return c
	})
	if err != nil {
		t.Fatal(err)
	}
	if g.PID() != cmd.Process.Pid {
		t.Fatalf("gate pid %d, command pid %d", g.PID(), cmd.Process.Pid)
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat(out); err == nil {
		t.Fatal("the held command ran before Open")
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", g.PID()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(stat, []byte("(sh) t ")) {
		t.Fatalf("held command's stat %q, want sh in state t", stat)
	}
	if err := g.Open(); err != nil {
		t.Fatal(err)
	}
	if err := g.Open(); err != nil {
		t.Fatalf("second Open: %v", err)
	}
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 3 {
		t.Fatalf("exit code %d (%v), want 3", code, err)
	}
	if stdout.String() != "hello\n" {
		t.Fatalf("stdout %q", stdout.String())
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatalf("the command did not run after Open: %v", err)
	}
}

// A command that cannot be started is an error, with nothing left behind.
func TestStartMissing(t *testing.T) {
	_, _, err := Start(func() *exec.Cmd { return exec.Command(filepath.Join(t.TempDir(), "missing")) })
	if err == nil {
		t.Fatal("started a missing command")
	}
}

// Package testutil holds what the tests of several packages share:
// starting a helper program that talks over its stdin and stdout, or one
// that says when it is ready, and a buffer that concurrent writers may
// share.
package testutil

import (
	"bufio"
	"bytes"
	"io"
	"os/exec"
	"strings"
	"sync"
	"testing"
)

// Start starts cmd with pipes on its stdin and stdout and returns them;
// it fails t when cmd cannot start. Waiting for cmd is the caller's.
func Start(t testing.TB, cmd *exec.Cmd) (stdin io.WriteCloser, stdout io.ReadCloser) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err = cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	return stdin, stdout
}

// StartReady starts cmd, waits for the first line it writes on stdout,
// which must be "ready", and returns its pid; the test kills it and waits
// for it at the end.
func StartReady(t testing.TB, cmd *exec.Cmd) int {
	t.Helper()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("%s: first line %q, want ready: %v", cmd.Path, line, err)
	}
	return cmd.Process.Pid
}

// StartPython runs python3 -c code with StartReady: code prints "ready"
// once it is where the test wants it.
func StartPython(t testing.TB, code string) int {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3, which make test installs:", err)
	}
	return StartReady(t, exec.Command(py, "-c", code))
}

// LockedBuffer is a buffer safe for concurrent writers (a command's
// stdout and stderr copiers). It has no ReadFrom, which would let io.Copy
// write around the lock.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// String returns what was written so far.
func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

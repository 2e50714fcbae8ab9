// Package testutil holds what the tests of several packages share:
// starting a helper program that talks over its stdin and stdout, and a
// buffer that concurrent writers may share.
package testutil

import (
	"bytes"
	"io"
	"os/exec"
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

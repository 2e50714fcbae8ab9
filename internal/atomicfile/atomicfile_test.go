package atomicfile

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFailureLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "sub") // a directory in the way of the rename
	os.Mkdir(target, 0o755)
	os.WriteFile(filepath.Join(target, "x"), nil, 0o644)
	if err := Write(target, []byte("data")); err == nil {
		t.Fatal("rename over a non-empty directory succeeded")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Fatalf("temporary file left behind: %v", ents)
	}
	p := filepath.Join(dir, "ok")
	if err := Write(p, []byte("data")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "data" {
		t.Fatalf("content %q", b)
	}
}

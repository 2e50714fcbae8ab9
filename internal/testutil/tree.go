package testutil

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Tree writes files under dir, name → content ("" makes a directory), each
// modified at mtime; it fails t when one cannot be made.
func Tree(t testing.TB, dir string, files map[string]string, mtime time.Time) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if content == "" {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		} else if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
}

package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
)

// What others put at the marker's path in the shared directory is refused
// without blocking, following, or reading it whole; the check goes on and
// a real marker written later still works.
func TestHostileMarkers(t *testing.T) {
	for _, c := range []struct {
		name string
		make func(t *testing.T, path string)
	}{
		{"fifo", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o666); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink to /dev/zero", func(t *testing.T, path string) {
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}},
		{"dangling symlink", func(t *testing.T, path string) {
			if err := os.Symlink(filepath.Join(t.TempDir(), "nope"), path); err != nil {
				t.Fatal(err)
			}
		}},
		{"sparse 1 GiB", func(t *testing.T, path string) {
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			f.Truncate(1 << 30)
			f.Close()
		}},
		{"directory", func(t *testing.T, path string) {
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, dumpfile.MarkerName("job1"))
			c.make(t, path)
			if _, _, _, err := dumpfile.ReadMarker(path); !errors.Is(err, dumpfile.ErrNotMarkerFile) {
				t.Errorf("ReadMarker: %v, want ErrNotMarkerFile", err)
			}
			b := newBed(t, "node-b", dir, map[int]map[string]string{200: env(1, 2)}, nil)
			work(b.Agent, 200, sec, true)
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			for range 3 {
				b.Tick(context.Background())
			}
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if took := time.Since(start); took > markerReadWait {
				t.Errorf("three checks took %v", took)
			}
			if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 16<<20 {
				t.Errorf("heap grew %d bytes reading the marker", grew)
			}
			if b.capture.count(200) != 0 || len(b.events("marker")) != 0 {
				t.Errorf("dumped on a hostile marker: %v", b.capture.calls)
			}
		})
	}
}

package timeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/internal/atomicfile"
)

// ErrMarkerWait reports a marker read that outlasted its wait (PollMarker).
var ErrMarkerWait = errors.New("marker read timed out")

// MarkerPath is the path of job's marker in dir.
func MarkerPath(dir, job string) string {
	return filepath.Join(dir, dumpfile.MarkerName(job))
}

// WriteMarker writes m as the marker of m.Job in dir, atomically, and
// returns its path.
func WriteMarker(dir string, m *dumpfile.Marker) (string, error) {
	b, err := json.MarshalIndent(m, "", " ")
	if err != nil {
		return "", fmt.Errorf("encode marker: %w", err)
	}
	path := MarkerPath(dir, m.Job)
	if err := atomicfile.Write(path, append(b, '\n')); err != nil {
		return "", fmt.Errorf("write marker: %w", err)
	}
	return path, nil
}

// Poll is one read of a marker: the marker, or why there is none (an error
// matching fs.ErrNotExist when no marker is there), and the file's
// modification time and size, to skip an unchanged file.
type Poll struct {
	Path   string
	Marker *dumpfile.Marker
	Mod    time.Time
	Size   int64
	Err    error
}

// PollMarker reads job's marker in dir (dumpfile.ReadMarker: no links
// followed, no FIFO blocked on) beside the caller, waiting at most wait:
// the directory is shared and its file system may be slow, and nothing in
// it may hold up the caller. A read that outlasts wait returns
// ErrMarkerWait and finishes in the background.
func PollMarker(dir, job string, wait time.Duration) Poll {
	path := MarkerPath(dir, job)
	done := make(chan Poll, 1)
	go func() {
		p := Poll{Path: path}
		p.Marker, p.Mod, p.Size, p.Err = dumpfile.ReadMarker(path)
		done <- p
	}()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case p := <-done:
		return p
	case <-t.C:
		return Poll{Path: path, Err: fmt.Errorf("%s: %w after %v", path, ErrMarkerWait, wait)}
	}
}

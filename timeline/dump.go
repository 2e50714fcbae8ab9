package timeline

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/trace"
	"github.com/xpu-timer/xpu-timer/internal/atomicfile"
)

// IncarnationsDir is the directory of the timeline path where the dumps of
// an earlier incarnation of a job go when a newer one dumps the same rank
// name: incarnations/<job>.<incarnation>/RRRRR-WWWWW.* (the job name made
// safe for a file name, "default" when the job has none).
const IncarnationsDir = "incarnations"

// maxAsideBytes bounds the earlier dump read to learn its incarnation.
const maxAsideBytes = 256 << 20

// Aside tells of the files of an earlier incarnation (or another job) that
// WriteDump moved out of the way before writing.
type Aside struct {
	Job         string // the earlier dump's job and incarnation
	Incarnation int
	To          string // the directory they went to
	Err         error  // what kept some or all of them from moving: those are overwritten
}

// WriteDump writes f into dir (dumpfile.Write: the dump and its text twin,
// atomically) after moving aside, into IncarnationsDir, the files of rank
// f.Rank of world f.WorldSize that an earlier incarnation (or another job)
// left there, so that the newer dump never overwrites nor mixes with them:
// the viewer merges one incarnation. A file that is not one of ours, or not
// a regular file, is left where it is (the write replaces it). aside is nil
// when nothing was in the way.
func WriteDump(dir string, f *dumpfile.File) (path string, aside *Aside, err error) {
	aside = moveAside(dir, f)
	path, err = dumpfile.Write(dir, f)
	if err != nil {
		return "", aside, fmt.Errorf("write dump of rank %d: %w", f.Rank, err)
	}
	return path, aside, nil
}

func moveAside(dir string, f *dumpfile.File) *Aside {
	name := dumpfile.Name(f.Rank, f.WorldSize)
	old := filepath.Join(dir, name)
	st, err := os.Lstat(old)
	if err != nil || !st.Mode().IsRegular() || st.Size() > maxAsideBytes {
		return nil
	}
	prev, err := dumpfile.Read(old)
	if err != nil || prev.Job == f.Job && prev.Incarnation == f.Incarnation {
		return nil
	}
	a := &Aside{Job: prev.Job, Incarnation: prev.Incarnation, To: filepath.Join(dir, IncarnationsDir, IncarnationName(prev.Job, prev.Incarnation))}
	if err := os.MkdirAll(a.To, 0o755); err != nil {
		a.Err = fmt.Errorf("move aside: %w", err)
		return a
	}
	stem := strings.TrimSuffix(name, dumpfile.Ext)
	var errs []error
	for _, ext := range []string{dumpfile.Ext, dumpfile.TextExt, trace.Ext} {
		if err := os.Rename(filepath.Join(dir, stem+ext), filepath.Join(a.To, stem+ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("move aside: %w", err))
		}
	}
	a.Err = errors.Join(errs...)
	return a
}

// WriteTrace writes the flight recorder trace of rank of world (encoded by
// flight.WriteChrome) into dir, atomically, and returns its path.
func WriteTrace(dir string, rank, world int, data []byte) (string, error) {
	path := filepath.Join(dir, trace.Name(rank, world))
	if err := atomicfile.Write(path, data); err != nil {
		return "", fmt.Errorf("write trace of rank %d: %w", rank, err)
	}
	return path, nil
}

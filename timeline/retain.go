package timeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/trace"
)

// Retention bounds what earlier incarnations leave in the timeline path
// (the agent's --retain-count, --retain-bytes and --retain-age). It only
// ever looks under IncarnationsDir, where WriteDump moves an earlier
// incarnation's dumps when a newer one dumps the same rank name, and only
// deletes whole incarnations there, oldest first: the files of the current
// incarnations, in the timeline path itself, are never touched, nor an
// incarnation directory that a live rank of this node belongs to.
//
// The timeline path is shared with strangers (other jobs, other nodes,
// people), so what retention deletes is narrow: regular files owned by
// this process's user, named as we name them (RRRRR-WWWWW.stacktrace, its
// .txt and .trace.json twins), in directories named <job>.<incarnation>
// directly under IncarnationsDir. Symbolic links are never followed nor
// removed, directories are removed only once empty, and it never leaves
// the timeline path (os.Root). Errors are returned (Retained.Errs); nothing
// stops the run.
//
// The zero Retention keeps everything.
type Retention struct {
	Count int           // earlier incarnations kept per job, newest first; 0: no limit
	Bytes int64         // bytes all earlier incarnations may take; 0: no limit
	Age   time.Duration // an incarnation whose newest file is older goes; 0: no limit
}

// DefaultRetainCount is the commands' default Retention.Count: earlier
// incarnations kept per job.
const DefaultRetainCount = 10

// Zero says whether r keeps everything.
func (r Retention) Zero() bool { return r.Count <= 0 && r.Bytes <= 0 && r.Age <= 0 }

// incDir is one incarnation directory as retention sees it.
type incDir struct {
	name   string    // "<job>.<incarnation>"
	job    string    // the job part of name
	newest time.Time // newest modification time of its files of ours
	bytes  int64     // size of its files of ours
	files  []string  // its files of ours
	keep   bool      // a live rank's incarnation: never deleted
}

// expired selects, from dirs, the incarnations r lets go: beyond Count of
// their job, older than Age, or past Bytes counting from the newest (then
// every older one goes too); never one marked keep. The result is oldest
// first.
func expired(dirs []incDir, r Retention, now time.Time) []incDir {
	dirs = slices.Clone(dirs)
	slices.SortFunc(dirs, func(x, y incDir) int {
		if c := y.newest.Compare(x.newest); c != 0 {
			return c
		}
		return cmp.Compare(y.name, x.name)
	})
	perJob := map[string]int{}
	var total int64
	over := false
	var out []incDir
	for _, d := range dirs {
		perJob[d.job]++
		if d.keep {
			total += d.bytes
			continue
		}
		switch {
		case r.Count > 0 && perJob[d.job] > r.Count,
			r.Age > 0 && now.Sub(d.newest) > r.Age,
			r.Bytes > 0 && (over || total+d.bytes > r.Bytes):
			over = over || r.Bytes > 0 && total+d.bytes > r.Bytes
			out = append(out, d)
			continue
		}
		total += d.bytes
	}
	slices.Reverse(out)
	return out
}

// IncarnationName is the directory under IncarnationsDir of a job's
// incarnation: the job made safe for a file name, "default" when none.
func IncarnationName(job string, inc int) string {
	sub := strings.TrimSuffix(strings.TrimPrefix(dumpfile.MarkerName(job), "hang-"), ".marker")
	return fmt.Sprintf("%s.%d", sub, inc)
}

// parseIncarnation reads the job part and the incarnation back from a
// directory name IncarnationName makes; ok is false for any other name, so
// that no other name is ever taken for an incarnation's:
// IncarnationName(job, inc) == name whenever ok (FuzzIncarnationName).
func parseIncarnation(name string) (job string, inc int, ok bool) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || i == len(name)-1 {
		return "", 0, false
	}
	digits := name[i+1:]
	if digits[0] == '0' && len(digits) > 1 {
		return "", 0, false // IncarnationName writes no leading zero
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return "", 0, false
		}
	}
	inc, err := strconv.Atoi(digits)
	if err != nil {
		return "", 0, false
	}
	for _, c := range name[:i] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return "", 0, false
		}
	}
	return name[:i], inc, true
}

// ours says whether name is a file name we write into an incarnation
// directory: a dump, its text twin or its trace, spelled exactly as
// dumpfile.Name spells the rank and world size (FuzzOurs).
func ours(name string) bool {
	stem, ok := strings.CutSuffix(name, trace.Ext)
	if !ok {
		stem, ok = strings.CutSuffix(name, dumpfile.TextExt)
	}
	if ok {
		name = stem + dumpfile.Ext
	}
	rank, world, ok := dumpfile.ParseName(name)
	return ok && dumpfile.Name(rank, world) == name
}

// Retained is what one retention run did.
type Retained struct {
	Removed []string // incarnation directories emptied of our files
	Files   int
	Bytes   int64
	Errs    []error // what it could not do; the run goes on past each
}

// Retain applies r to dir's IncarnationsDir, sparing the incarnation
// directories named in keep (IncarnationName), within ctx.
func Retain(ctx context.Context, dir string, r Retention, keep map[string]bool, now time.Time) (res Retained) {
	if r.Zero() {
		return res
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			res.Errs = append(res.Errs, err)
		}
		return res
	}
	defer root.Close()
	inc, err := openDir(root, IncarnationsDir)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			res.Errs = append(res.Errs, err)
		}
		return res
	}
	defer inc.Close()
	dirs, errs := listIncarnations(ctx, inc, keep)
	res.Errs = append(res.Errs, errs...)
	for _, d := range expired(dirs, r, now) {
		if ctx.Err() != nil {
			res.Errs = append(res.Errs, fmt.Errorf("retention stopped after %d incarnations: %w", len(res.Removed), ctx.Err()))
			break
		}
		sub, err := openDir(inc, d.name)
		if err != nil {
			res.Errs = append(res.Errs, err)
			continue
		}
		for _, f := range d.files {
			if err := sub.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
				res.Errs = append(res.Errs, fmt.Errorf("remove %s/%s: %w", d.name, f, err))
				continue
			}
			res.Files++
		}
		sub.Close()
		res.Bytes += d.bytes
		res.Removed = append(res.Removed, d.name)
		// Removed only when nothing else is left in it.
		_ = inc.Remove(d.name)
	}
	return res
}

// openDir opens name under r as a Root, only when name is a directory
// itself, not a symbolic link to one.
func openDir(r *os.Root, name string) (*os.Root, error) {
	st, err := r.Lstat(name)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%s is not a directory (%v): left alone", name, st.Mode().Type())
	}
	sub, err := r.OpenRoot(name)
	if err != nil {
		return nil, err
	}
	if now, err := sub.Stat("."); err != nil || !os.SameFile(st, now) {
		sub.Close()
		return nil, fmt.Errorf("%s changed while it was opened: left alone", name)
	}
	return sub, nil
}

// listIncarnations lists the incarnation directories under inc with their
// files of ours (regular files, our names, our user).
func listIncarnations(ctx context.Context, inc *os.Root, keep map[string]bool) ([]incDir, []error) {
	var errs []error
	entries, err := readDir(inc)
	if err != nil {
		return nil, []error{err}
	}
	uid := os.Geteuid()
	var out []incDir
	for _, e := range entries {
		if ctx.Err() != nil {
			return out, append(errs, ctx.Err())
		}
		job, _, ok := parseIncarnation(e.Name())
		if !ok || e.Type() != fs.ModeDir {
			continue
		}
		sub, err := openDir(inc, e.Name())
		if err != nil {
			errs = append(errs, err)
			continue
		}
		d := incDir{name: e.Name(), job: job, keep: keep[e.Name()]}
		files, err := readDir(sub)
		if err != nil {
			errs = append(errs, err)
		}
		for _, f := range files {
			if !ours(f.Name()) || !f.Type().IsRegular() {
				continue
			}
			st, err := sub.Lstat(f.Name())
			if err != nil || !st.Mode().IsRegular() {
				continue
			}
			if s, ok := st.Sys().(*syscall.Stat_t); !ok || int(s.Uid) != uid {
				continue
			}
			d.files = append(d.files, f.Name())
			d.bytes += st.Size()
			if st.ModTime().After(d.newest) {
				d.newest = st.ModTime()
			}
		}
		sub.Close()
		if len(d.files) > 0 {
			out = append(out, d)
		}
	}
	return out, errs
}

// readDir lists the directory r opened.
func readDir(r *os.Root) ([]fs.DirEntry, error) {
	f, err := r.Open(".")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.ReadDir(-1)
}

package viewer

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/timeline"
)

// runBounded runs the viewer and fails the test if it does not return: a
// FIFO or /dev/zero read by mistake would block or run for ever.
func runBounded(t *testing.T, o Options) (*Result, error) {
	t.Helper()
	type out struct {
		res *Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := Run(o)
		done <- out{res, err}
	}()
	select {
	case o := <-done:
		return o.res, o.err
	case <-time.After(time.Minute):
		t.Fatal("the viewer did not return within a minute")
		return nil, nil
	}
}

// TestHostileInputs puts, in place of rank 1's dump, each thing a
// neighbour could leave in a shared directory: the viewer skips it, names
// it and why, and merges the rest.
func TestHostileInputs(t *testing.T) {
	outside := t.TempDir()
	good, err := os.ReadFile(filepath.Join(faultDir("nccl-stall"), dumpfile.Name(1, world)))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(outside, "rank1.stacktrace"), good, 0o644)
	for _, tc := range []struct {
		name  string
		plant func(path string) error
		err   error
		why   string
	}{
		{"fifo", func(p string) error { return syscall.Mkfifo(p, 0o644) }, ErrNotRegular, "a FIFO"},
		{"symlink to /dev/zero", func(p string) error { return os.Symlink("/dev/zero", p) }, ErrNotRegular, "a symbolic link to /dev/zero, outside"},
		{"dangling symlink", func(p string) error { return os.Symlink("/nonexistent/x", p) }, ErrNotRegular, "a dangling symbolic link"},
		{"symlink outside", func(p string) error { return os.Symlink(filepath.Join(outside, "rank1.stacktrace"), p) }, ErrNotRegular, "outside"},
		{"directory", func(p string) error { return os.Mkdir(p, 0o755) }, ErrNotRegular, "a directory"},
		{"too large", func(p string) error {
			f, err := os.Create(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Truncate(2 << 20) // sparse
		}, ErrTooLarge, "2097152 bytes, the limit is 1048576"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := copyDir(t, "nccl-stall")
			p := filepath.Join(dir, dumpfile.Name(1, world))
			os.Remove(p)
			if err := tc.plant(p); err != nil {
				t.Fatal(err)
			}
			res, err := runBounded(t, Options{Dir: dir, Out: t.TempDir(), MaxFileSize: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Skipped) != 1 || res.Skipped[0].Path != p || !errors.Is(res.Skipped[0].Err, tc.err) ||
				!strings.Contains(res.Skipped[0].Err.Error(), tc.why) {
				t.Fatalf("skipped %v, want %s for %s (%s)", res.Skipped, tc.err, p, tc.why)
			}
			if !strings.Contains(res.Summary, "Skipped files:") || !strings.Contains(res.Summary, p) {
				t.Errorf("summary does not name %s:\n%s", p, res.Summary)
			}
			if res.Files != world-1 || !slices.Equal(res.Missing, []int{1}) {
				t.Errorf("files %d, missing %v", res.Files, res.Missing)
			}
		})
	}
}

// TestReadRefusesLateSwaps checks the open itself: a file swapped for a
// symbolic link or a FIFO after the listing is refused, not followed or
// waited on.
func TestReadRefusesLateSwaps(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(dir, "link")
	os.Symlink("/dev/zero", link)
	fifo := filepath.Join(dir, "fifo")
	syscall.Mkfifo(fifo, 0o644)
	for _, p := range []string{link, fifo} {
		if _, _, err := readFile(p, 1<<20); !errors.Is(err, ErrNotRegular) {
			t.Errorf("%s: %v, want ErrNotRegular", p, err)
		}
	}
}

// TestOutputsReplaceSymlinks plants symbolic links under the outputs'
// names in the shared directory: the viewer replaces the links and leaves
// their targets alone.
func TestOutputsReplaceSymlinks(t *testing.T) {
	dir := copyDir(t, "nccl-stall")
	victims := t.TempDir()
	names := []string{timeline.Summary, timeline.CppSVG, timeline.CppFolded, timeline.Profile}
	for _, name := range names {
		v := filepath.Join(victims, name)
		os.WriteFile(v, []byte("precious"), 0o644)
		if err := os.Symlink(v, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := runBounded(t, Options{Dir: dir}); err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if data, _ := os.ReadFile(filepath.Join(victims, name)); string(data) != "precious" {
			t.Errorf("%s: the link's target was overwritten", name)
		}
		st, err := os.Lstat(filepath.Join(dir, name))
		if err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
			t.Errorf("%s: %v, want a new regular file", name, err)
		}
	}
	left, _ := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// writeRun writes rank's dump of a job incarnation with world ranks into
// dir, as the agent would, dumped at the given minute.
func writeRun(t *testing.T, dir, job string, inc, rank, world, minute int) {
	t.Helper()
	f := rankFile("", "nccl-stall", rank, world, rand.New(rand.NewPCG(1, 2)))
	f.Job, f.Incarnation = job, inc
	f.DumpedAt = time.Date(2026, 11, 22, 14, minute, 0, 0, time.UTC)
	if _, err := dumpfile.Write(dir, f); err != nil {
		t.Fatal(err)
	}
}

// TestIncarnations is an elastic job restarted with a new world size, both
// incarnations' dumps in one directory: 00000-00004, 00001-00004 and
// 00001-00008.
func TestIncarnations(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, "train-7f3a", 0, 0, 4, 1)
	writeRun(t, dir, "train-7f3a", 0, 1, 4, 1)
	writeRun(t, dir, "train-7f3a", 1, 1, 8, 9)

	res, err := Run(Options{Dir: dir, Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if res.World != 8 || res.Files != 1 || len(res.Missing) != 7 || len(res.Conflicts) != 0 {
		t.Errorf("newest: world %d, files %d, missing %v, conflicts %q", res.World, res.Files, res.Missing, res.Conflicts)
	}
	for _, want := range []string{
		" * job train-7f3a incarnation 1 world size 8: 1 file (00001-00008.stacktrace)",
		"   job train-7f3a incarnation 0 world size 4: 2 files (00000-00004.stacktrace, 00001-00004.stacktrace)",
	} {
		if !strings.Contains(res.Summary, want) {
			t.Errorf("summary lacks %q:\n%s", want, res.Summary)
		}
	}

	zero := 0
	res, err = Run(Options{Dir: dir, Out: t.TempDir(), Incarnation: &zero})
	if err != nil {
		t.Fatal(err)
	}
	if res.World != 4 || res.Files != 2 || len(res.Missing) != 2 {
		t.Errorf("--incarnation 0: world %d, files %d, missing %v", res.World, res.Files, res.Missing)
	}
	seven := 7
	if _, err := Run(Options{Dir: dir, Out: t.TempDir(), Incarnation: &seven}); !errors.Is(err, ErrNoStacks) ||
		!strings.Contains(err.Error(), "no dumps of incarnation 7") {
		t.Errorf("--incarnation 7: %v", err)
	}
}

// TestConflicts: files that record no job or incarnation (schema 1.0) of
// two world sizes, and two files for one rank, are named, never chosen
// between in silence; the same files give the same result every time.
func TestConflicts(t *testing.T) {
	dir := t.TempDir()
	writeRun(t, dir, "", 0, 0, 4, 1)
	writeRun(t, dir, "", 0, 1, 4, 1)
	writeRun(t, dir, "", 0, 1, 8, 9)
	// A copy of rank 0's dump under another name.
	data, _ := os.ReadFile(filepath.Join(dir, dumpfile.Name(0, 4)))
	os.WriteFile(filepath.Join(dir, "rank0-copy.stacktrace"), data, 0o644)
	var first string
	for i := range 5 {
		res, err := Run(Options{Dir: dir, Out: t.TempDir(), Workers: 1 + i%3})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{
			"two files for rank 0 of job (unnamed) incarnation 0 world size 4: 00000-00004.stacktrace merged, rank0-copy.stacktrace left out",
			"job (unnamed) incarnation 0 has dumps of 2 world sizes: 8 (00001-00008.stacktrace); 4 (00000-00004.stacktrace, 00001-00004.stacktrace)",
		}
		if !slices.Equal(res.Conflicts, want) {
			t.Errorf("conflicts %q, want %q", res.Conflicts, want)
		}
		if res.World != 8 || !strings.Contains(res.Summary, "Conflicts:\n  two files for rank 0") {
			t.Errorf("world %d, summary:\n%s", res.World, res.Summary)
		}
		if i == 0 {
			first = res.Summary
		} else if res.Summary != first {
			t.Errorf("run %d differs from the first:\n%s\n---\n%s", i, res.Summary, first)
		}
	}
}

// TestXpuTimerFiles merges xpu_timer's protobuf dump of rank 2 with our
// dumps of the other ranks (the real sleep hang), read with its flags'
// defaults.
func TestXpuTimerFiles(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join("testdata", "torchjob", "sleep")
	for _, r := range []int{0, 1, 3} {
		data, err := os.ReadFile(filepath.Join(src, dumpfile.Name(r, 4)))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, dumpfile.Name(r, 4)), data, 0o644)
	}
	pb, err := os.ReadFile(filepath.Join("protodump", "testdata", "00002-00004.stacktrace"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, dumpfile.Name(2, 4)), pb, 0o644)
	out := t.TempDir()
	res, err := Run(Options{Dir: dir, Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if res.Files != 4 || len(res.Skipped) != 0 || len(res.Missing) != 0 {
		t.Fatalf("files %d, skipped %v, missing %v\n%s", res.Files, res.Skipped, res.Missing, res.Summary)
	}
	if !slices.Equal(res.Report.Culprits, []int{2}) || !strings.Contains(res.Summary, "main thread is in stall (train.py:40)") {
		t.Errorf("culprits %v\n%s", res.Report.Culprits, res.Summary)
	}
	py, _ := os.ReadFile(filepath.Join(out, timeline.PyFolded))
	if !bytes.Contains(py, []byte("stall@/job/train.py:40@2|0-1/3")) {
		t.Errorf("py_stack lacks xpu_timer's frame:\n%s", py)
	}
}

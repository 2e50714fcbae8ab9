package timeline

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

func TestExpired(t *testing.T) {
	now := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	d := func(name string, hoursAgo int, bytes int64) incDir {
		job, _, _ := parseIncarnation(name)
		return incDir{name: name, job: job, newest: now.Add(-time.Duration(hoursAgo) * time.Hour), bytes: bytes}
	}
	kept := func(x incDir) incDir { x.keep = true; return x }
	dirs := []incDir{d("a.0", 50, 100), d("a.1", 40, 100), d("a.2", 30, 100), d("b.0", 45, 100), d("b.1", 20, 100)}
	for _, tc := range []struct {
		name string
		dirs []incDir
		r    Retention
		want []string // oldest first
	}{
		{name: "zero keeps everything", dirs: dirs, r: Retention{}},
		{name: "count per job", dirs: dirs, r: Retention{Count: 1}, want: []string{"a.0", "b.0", "a.1"}},
		{name: "count larger than any job", dirs: dirs, r: Retention{Count: 3}},
		{name: "age", dirs: dirs, r: Retention{Age: 42 * time.Hour}, want: []string{"a.0", "b.0"}},
		{name: "bytes from the newest", dirs: dirs, r: Retention{Bytes: 300}, want: []string{"a.0", "b.0"}},
		{name: "bytes: once over, every older one goes", dirs: []incDir{d("a.0", 3, 10), d("a.1", 2, 500), d("a.2", 1, 10)}, r: Retention{Bytes: 100},
			want: []string{"a.0", "a.1"}},
		{name: "limits combine", dirs: dirs, r: Retention{Count: 2, Age: 35 * time.Hour, Bytes: 1000}, want: []string{"a.0", "b.0", "a.1"}},
		{name: "a live rank's incarnation is never deleted", dirs: append([]incDir{kept(d("a.0", 50, 100))}, dirs[1:]...), r: Retention{Count: 1, Age: time.Hour, Bytes: 1},
			want: []string{"b.0", "a.1", "a.2", "b.1"}},
		{name: "ties by name", dirs: []incDir{d("a.1", 5, 1), d("a.2", 5, 1), d("a.0", 5, 1)}, r: Retention{Count: 1}, want: []string{"a.0", "a.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, x := range expired(tc.dirs, tc.r, now) {
				got = append(got, x.name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("expired = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseIncarnationAndOurs(t *testing.T) {
	for _, tc := range []struct {
		name, job string
		ok        bool
	}{
		{"default.0", "default", true}, {"llama_run.3", "llama_run", true}, {"10.0.0.1_29500.12", "10.0.0.1_29500", true},
		{IncarnationName("run/x:y", 4), "run_x_y", true},
		{".3", "", false}, {"job.", "", false}, {"job", "", false}, {"job.-1", "", false}, {"job.1a", "", false}, {"jo b.1", "", false},
		{"job.007", "", false}, {"job.99999999999999999999", "", false},
	} {
		job, _, ok := parseIncarnation(tc.name)
		if ok != tc.ok || job != tc.job {
			t.Errorf("parseIncarnation(%q) = %q, %v", tc.name, job, ok)
		}
	}
	for name, want := range map[string]bool{
		"00001-00004.stacktrace": true, "00001-00004.txt": true, "00001-00004.trace.json": true,
		"00004-00004.stacktrace": false, "notes.txt": false, "00001-00004.stacktrace.tmp": false, ".00001-00004.stacktrace": false,
		"00001-00004.json": false, "hang-job.marker": false,
		"000001-00004.stacktrace": false, "00001-000004.txt": false, "a/00001-00004.stacktrace": false,
	} {
		if ours(name) != want {
			t.Errorf("ours(%q) = %v", name, !want)
		}
	}
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// Retention deletes only our files of expired earlier incarnations, and
// none of the hostile things a shared directory may hold.
func TestRetainLeavesStrangersAlone(t *testing.T) {
	now := time.Now()
	dir, outside := t.TempDir(), t.TempDir()
	old := now.Add(-48 * time.Hour)
	testutil.Tree(t, outside, map[string]string{"00000-00002.stacktrace": "precious", "victim/00000-00002.stacktrace": "precious"}, old)
	testutil.Tree(t, dir, map[string]string{
		dumpfile.Name(0, 2): "current", "00000-00002.txt": "current", "00000-00002.trace.json": "current", // the current incarnation
		"incarnations/job.0/00000-00002.stacktrace": "old", "incarnations/job.0/00000-00002.txt": "old",
		"incarnations/job.0/00001-00002.trace.json":    "old",
		"incarnations/job.0/notes.md":                  "a stranger's",
		"incarnations/job.0/00001-00002.stacktrace":    "", // a directory named like a dump
		"incarnations/job.1/00000-00002.stacktrace":    "old",
		"incarnations/not-ours/00000-00002.stacktrace": "a stranger's", // no incarnation name
		"incarnations/README":                          "a stranger's",
	}, old)
	// A symlink named like a dump, to a file outside; a symlinked
	// incarnation directory; a symlink to a directory outside.
	for link, target := range map[string]string{
		"incarnations/job.1/00001-00002.stacktrace": filepath.Join(outside, "00000-00002.stacktrace"),
		"incarnations/job.7":                        filepath.Join(outside, "victim"),
	} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	res := Retain(context.Background(), dir, Retention{Age: time.Hour}, nil, now)
	if len(res.Errs) != 0 {
		t.Errorf("errors %v", res.Errs)
	}
	if !slices.Equal(res.Removed, []string{"job.0", "job.1"}) && !slices.Equal(res.Removed, []string{"job.1", "job.0"}) || res.Files != 4 {
		t.Errorf("removed %v, %d files", res.Removed, res.Files)
	}
	for _, gone := range []string{"incarnations/job.0/00000-00002.stacktrace", "incarnations/job.0/00000-00002.txt",
		"incarnations/job.0/00001-00002.trace.json", "incarnations/job.1/00000-00002.stacktrace"} {
		if exists(filepath.Join(dir, gone)) {
			t.Errorf("%s kept", gone)
		}
	}
	for _, kept := range []string{dumpfile.Name(0, 2), "00000-00002.txt", "00000-00002.trace.json",
		"incarnations/job.0/notes.md", "incarnations/job.0/00001-00002.stacktrace", "incarnations/job.1/00001-00002.stacktrace",
		"incarnations/job.7", "incarnations/not-ours/00000-00002.stacktrace", "incarnations/README"} {
		if !exists(filepath.Join(dir, kept)) {
			t.Errorf("%s deleted", kept)
		}
	}
	for _, kept := range []string{"00000-00002.stacktrace", "victim/00000-00002.stacktrace"} {
		if !exists(filepath.Join(outside, kept)) {
			t.Errorf("outside %s deleted", kept)
		}
	}
	if !exists(filepath.Join(dir, "incarnations/job.1")) {
		t.Error("job.1 removed with a stranger's symlink in it")
	}
	// An emptied incarnation directory goes too.
	testutil.Tree(t, dir, map[string]string{"incarnations/job.2/00000-00002.stacktrace": "old"}, old)
	if res := Retain(context.Background(), dir, Retention{Age: time.Hour}, nil, now); res.Files != 1 || exists(filepath.Join(dir, "incarnations/job.2")) {
		t.Errorf("job.2: %+v, directory kept", res)
	}
}

// A symlinked incarnations directory is never entered, and the live
// ranks' incarnations are kept.
func TestRetainSymlinkedRootAndKeep(t *testing.T) {
	now := time.Now()
	dir, outside := t.TempDir(), t.TempDir()
	old := now.Add(-48 * time.Hour)
	testutil.Tree(t, outside, map[string]string{"job.0/00000-00002.stacktrace": "precious"}, old)
	if err := os.Symlink(outside, filepath.Join(dir, IncarnationsDir)); err != nil {
		t.Fatal(err)
	}
	res := Retain(context.Background(), dir, Retention{Count: 1, Age: time.Second}, nil, now)
	if res.Files != 0 || !exists(filepath.Join(outside, "job.0/00000-00002.stacktrace")) || len(res.Errs) != 1 {
		t.Fatalf("followed the symlinked incarnations directory: %+v", res)
	}
	dir = t.TempDir()
	testutil.Tree(t, dir, map[string]string{"incarnations/job.0/00000-00002.stacktrace": "live", "incarnations/job.1/00000-00002.stacktrace": "old"}, old)
	res = Retain(context.Background(), dir, Retention{Age: time.Second}, map[string]bool{"job.0": true}, now)
	if res.Files != 1 || !exists(filepath.Join(dir, "incarnations/job.0/00000-00002.stacktrace")) {
		t.Fatalf("keep: %+v", res)
	}
	// Nothing there, or no timeline path at all: nothing to do, no error.
	if res := Retain(context.Background(), filepath.Join(dir, "nope"), Retention{Count: 1}, nil, now); len(res.Errs) != 0 {
		t.Fatalf("missing path: %v", res.Errs)
	}
	// A cancelled run deletes nothing.
	testutil.Tree(t, dir, map[string]string{"incarnations/job.3/00000-00002.stacktrace": "old"}, old)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res := Retain(ctx, dir, Retention{Age: time.Second}, nil, now); res.Files != 0 || len(res.Errs) == 0 {
		t.Fatalf("cancelled: %+v", res)
	}
}

// A file of another user, named like ours, is never deleted.
func TestRetainOtherUsersFile(t *testing.T) {
	privileged.Root(t)
	now := time.Now()
	dir := t.TempDir()
	old := now.Add(-48 * time.Hour)
	testutil.Tree(t, dir, map[string]string{"incarnations/job.0/00000-00002.stacktrace": "theirs", "incarnations/job.0/00001-00002.stacktrace": "ours"}, old)
	theirs := filepath.Join(dir, "incarnations/job.0/00000-00002.stacktrace")
	if err := os.Lchown(theirs, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	res := Retain(context.Background(), dir, Retention{Age: time.Hour}, nil, now)
	if res.Files != 1 || !exists(theirs) || exists(filepath.Join(dir, "incarnations/job.0/00001-00002.stacktrace")) {
		t.Fatalf("%+v; theirs kept %v", res, exists(theirs))
	}
}

package timeline

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
)

func rankFile(job string, inc int) *dumpfile.File {
	return &dumpfile.File{Rank: 1, WorldSize: 2, PID: 42, State: "S (sleeping)", Reason: dumpfile.ReasonHang, Job: job, Incarnation: inc}
}

// A newer incarnation's dump moves the earlier one's files (dump, text,
// trace) aside; the same incarnation's rewrite replaces its own.
func TestWriteDumpMovesAside(t *testing.T) {
	dir := t.TempDir()
	if _, aside, err := WriteDump(dir, rankFile("job", 0)); err != nil || aside != nil {
		t.Fatalf("first dump: aside %+v, %v", aside, err)
	}
	if _, err := WriteTrace(dir, 1, 2, []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	if _, aside, err := WriteDump(dir, rankFile("job", 0)); err != nil || aside != nil {
		t.Fatalf("rewrite: aside %+v, %v", aside, err)
	}
	path, aside, err := WriteDump(dir, rankFile("job", 1))
	if err != nil || path != filepath.Join(dir, "00001-00002.stacktrace") {
		t.Fatalf("newer dump: %s, %v", path, err)
	}
	to := filepath.Join(dir, IncarnationsDir, "job.0")
	if aside == nil || aside.Job != "job" || aside.Incarnation != 0 || aside.To != to || aside.Err != nil {
		t.Fatalf("aside %+v", aside)
	}
	for _, name := range []string{"00001-00002.stacktrace", "00001-00002.txt", "00001-00002.trace.json"} {
		if !exists(filepath.Join(to, name)) {
			t.Errorf("%s not moved aside", name)
		}
	}
	if f, err := dumpfile.Read(path); err != nil || f.Incarnation != 1 {
		t.Fatalf("current dump %+v, %v", f, err)
	}
	if exists(filepath.Join(dir, "00001-00002.trace.json")) {
		t.Error("the earlier trace is still beside the newer dump")
	}
}

// When the earlier files cannot move, the dump is still written over them,
// and Aside says why.
func TestWriteDumpAsideFails(t *testing.T) {
	dir := t.TempDir()
	if _, _, err := WriteDump(dir, rankFile("a", 0)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, IncarnationsDir), []byte("in the way"), 0o644); err != nil {
		t.Fatal(err)
	}
	path, aside, err := WriteDump(dir, rankFile("b", 0))
	if err != nil || aside == nil || aside.Err == nil || aside.Job != "a" {
		t.Fatalf("aside %+v, %v", aside, err)
	}
	if f, err := dumpfile.Read(path); err != nil || f.Job != "b" {
		t.Fatalf("dump %+v, %v", f, err)
	}
}

// A marker written is read back whole; none there reads as fs.ErrNotExist.
func TestMarkerRoundTrip(t *testing.T) {
	dir := t.TempDir()
	if p := PollMarker(dir, "llama", time.Minute); !errors.Is(p.Err, fs.ErrNotExist) || p.Path != filepath.Join(dir, "hang-llama.marker") {
		t.Fatalf("no marker: %+v", p)
	}
	m := &dumpfile.Marker{Schema: dumpfile.MarkerSchema, ID: "h/1/2/3", Agent: "h/1/2", Job: "llama", Host: "h",
		Time: time.Date(2026, 11, 26, 13, 0, 0, 0, time.UTC), Ranks: []int{3}, PIDs: []int{77}, Kinds: []dumpfile.HangKind{dumpfile.HangGPU}, Timeline: dir}
	path, err := WriteMarker(dir, m)
	if err != nil || path != MarkerPath(dir, "llama") {
		t.Fatalf("write: %s, %v", path, err)
	}
	p := PollMarker(dir, "llama", time.Minute)
	if p.Err != nil || !reflect.DeepEqual(p.Marker, m) || p.Size == 0 || p.Mod.IsZero() {
		t.Fatalf("read back %+v", p)
	}
}

// List names the current dumps, sorted, and the entries named as dumps that
// are no regular files; other names and the incarnations are not its.
func TestList(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []*dumpfile.File{{Rank: 1, WorldSize: 2, Job: "j"}, {Rank: 0, WorldSize: 2, Job: "j"}, {Rank: 0, WorldSize: 1, Job: "old"}} {
		d := dir
		if f.Job == "old" {
			d = filepath.Join(dir, IncarnationsDir, "old.0")
			os.MkdirAll(d, 0o755)
		}
		if _, err := dumpfile.Write(d, f); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("00000-00002.stacktrace", filepath.Join(dir, "00002-00004.stacktrace")); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, "x.stacktrace"), 0o755)
	dumps, odd, err := List(dir)
	want := []string{filepath.Join(dir, "00000-00002.stacktrace"), filepath.Join(dir, "00001-00002.stacktrace")}
	if err != nil || !reflect.DeepEqual(dumps, want) {
		t.Fatalf("dumps %v, %v; want %v", dumps, err, want)
	}
	if len(odd) != 2 || odd[0].Mode&fs.ModeSymlink == 0 || !odd[1].Mode.IsDir() {
		t.Fatalf("odd %+v", odd)
	}
	if _, _, err := List(filepath.Join(dir, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing dir: %v", err)
	}
}

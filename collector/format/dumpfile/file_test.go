package dumpfile

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
)

func sample() *File {
	return &File{
		Rank: 3, WorldSize: 8, LocalRank: 3, LocalWorldSize: 8, Host: "node-0", PID: 4242,
		Cmdline: []string{"python3", "train.py"}, State: "S (sleeping)", Reason: "hang",
		DumpedAt: time.Date(2026, 11, 22, 14, 0, 0, 0, time.UTC), DumpDuration: 12 * time.Millisecond,
		Hang: &Hang{Kind: "gpu", PID: 4242, Rank: 3, AgeNs: 301e9, Timeout: 300e9,
			Oldest: &Op{Kind: "collective", Op: "AllReduce", Seq: 12, Comm: "3f2a0b1c9d8e7f60a1b2c3d4e5f60718", NRanks: 8}},
		Comms: []CommState{{ID: "3f2a0b1c9d8e7f60a1b2c3d4e5f60718", Rank: 3, NRanks: 8, Issued: 12, Completed: 11, LastOp: "AllReduce"}},
		Threads: []stack.Thread{{TID: 4242, Name: "python3", State: "S", GIL: true,
			Native: []stack.Frame{{Func: "pthread_cond_wait@@GLIBC_2.3.2", Module: "/lib/x86_64-linux-gnu/libc.so.6", Addr: 0x7f00}},
			Python: []stack.Frame{{Func: "step", File: "train.py", Line: 40, Module: "python"}}}},
	}
}

func TestNameRoundTrip(t *testing.T) {
	for _, tc := range []struct{ rank, world int }{{0, 1}, {3, 8}, {4095, 4096}, {99999, 100000}} {
		name := Name(tc.rank, tc.world)
		r, w, ok := ParseName(filepath.Join("/x", name))
		if !ok || r != tc.rank || w != tc.world {
			t.Errorf("ParseName(%q) = %d, %d, %v", name, r, w, ok)
		}
	}
	if got := Name(3, 8); got != "00003-00008.stacktrace" {
		t.Errorf("Name(3, 8) = %q", got)
	}
	for _, bad := range []string{"3-8.stacktrace", "00003-00008.txt", "00008-00008.stacktrace", "0000a-00008.stacktrace", "00003_00008.stacktrace", "+0003-00008.stacktrace", "00003-00000.stacktrace"} {
		if _, _, ok := ParseName(bad); ok {
			t.Errorf("ParseName(%q) accepted", bad)
		}
	}
}

func TestWriteRead(t *testing.T) {
	dir := t.TempDir()
	f := sample()
	path, err := Write(dir, f)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(path) != "00003-00008.stacktrace" {
		t.Errorf("path %s", path)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Schema != Schema {
		t.Errorf("schema %q", got.Schema)
	}
	if !reflect.DeepEqual(got, f) {
		t.Errorf("round trip differs:\n got %+v\nwant %+v", got, f)
	}
	txt, err := os.ReadFile(filepath.Join(dir, "00003-00008.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"rank 3 of 8", "pthread_cond_wait@@GLIBC_2.3.2", "AllReduce #12", "step at train.py:40", "issued 12, completed 11"} {
		if !strings.Contains(string(txt), want) {
			t.Errorf("text lacks %q:\n%s", want, txt)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		t.Errorf("want the dump and its text only, have %v", ents)
	}
	// Rewriting replaces the file in place.
	f.State = "D (disk sleep)"
	if _, err := Write(dir, f); err != nil {
		t.Fatal(err)
	}
	if got, _ := Read(path); got.State != "D (disk sleep)" {
		t.Errorf("rewrite not seen: %q", got.State)
	}
}

func TestWriteRejects(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []*File{{Rank: 8, WorldSize: 8}, {Rank: -1, WorldSize: 8}, {WorldSize: 0}} {
		if _, err := Write(dir, f); err == nil {
			t.Errorf("Write(rank %d of %d) succeeded", f.Rank, f.WorldSize)
		}
	}
	if _, err := Write(filepath.Join(dir, "nope"), sample()); err == nil {
		t.Error("Write into a missing directory succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left files behind: %v", ents)
	}
}

func TestReadErrors(t *testing.T) {
	good, err := json.Marshal(sample())
	if err != nil {
		t.Fatal(err)
	}
	withSchema, _ := json.Marshal(func() *File { f := sample(); f.Schema = Schema; return f }())
	for _, tc := range []struct {
		name string
		data string
		want error
	}{
		{"empty", "", ErrEmpty},
		{"blank", " \n\t", ErrEmpty},
		{"truncated", string(withSchema[:len(withSchema)/2]), ErrTruncated},
		{"corrupt", `{"schema":"xpu-timer.stacktrace/1.0","rank":"three"}`, ErrCorrupt},
		{"garbage", "\x00\x01binary", ErrCorrupt},
		{"no schema", string(good), ErrForeign},
		{"other schema", `{"schema":"py-spy/2","rank":1}`, ErrForeign},
		{"other schema wrong shape", `{"schema":"other/1","threads":"none"}`, ErrForeign},
		{"not an object", `[1,2,3]`, ErrForeign},
		{"future major", `{"schema":"xpu-timer.stacktrace/2.0","rank":0,"world_size":1}`, ErrForeign},
		{"rank outside world", `{"schema":"xpu-timer.stacktrace/1.0","rank":9,"world_size":8}`, ErrCorrupt},
		{"no world", `{"schema":"xpu-timer.stacktrace/1.0","rank":0}`, ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "00000-00001.stacktrace")
			if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Read(path)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Read: %v, want %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file", err)
			}
		})
	}
	if _, err := Parse([]byte(`{"schema":"xpu-timer.stacktrace/1.7","rank":0,"world_size":1,"new_field":1}`)); err != nil {
		t.Errorf("a newer minor version with unknown fields: %v", err)
	}
}

// FuzzParse feeds Parse arbitrary bytes: it must never panic, must classify
// every failure, and whatever it accepts must survive a write and read.
func FuzzParse(f *testing.F) {
	good, _ := json.Marshal(func() *File { x := sample(); x.Schema = Schema; return x }())
	f.Add(good)
	f.Add(good[:len(good)/3])
	f.Add([]byte(""))
	f.Add([]byte(`{"schema":"xpu-timer.stacktrace/1.0","rank":0,"world_size":1,"threads":[{"tid":1,"native":[{"func":"a@@b"}]}]}`))
	f.Add([]byte(`{"schema":"other"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data)
		if err != nil {
			if !errors.Is(err, ErrEmpty) && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrForeign) {
				t.Fatalf("unclassified error: %v", err)
			}
			return
		}
		path, err := Write(t.TempDir(), file)
		if err != nil {
			t.Fatalf("write accepted file: %v", err)
		}
		if _, err := Read(path); err != nil {
			t.Fatalf("read back: %v", err)
		}
		_ = Text(file)
	})
}

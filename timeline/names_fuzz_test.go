package timeline

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/trace"
)

// The names below decide what retention deletes in a directory shared with
// strangers, so they are fuzzed as a contract: every name we make reads
// back as what made it, and no other name reads as one of ours.

// FuzzIncarnationName: parse(IncarnationName(job, inc)) is the job as the
// name spells it and inc, for every job and incarnation; and any name that
// parses is the one IncarnationName makes of what it parsed to, so no
// name is taken for another incarnation's.
func FuzzIncarnationName(f *testing.F) {
	for _, s := range []string{"", "default", "llama_run", "10.0.0.1:29500", "run/x:y", "..", "a.1", "é", "job.007"} {
		f.Add(s, 0, s)
		f.Add(s, 12, s+".3")
	}
	f.Fuzz(func(t *testing.T, job string, inc int, name string) {
		if inc < 0 {
			inc = -(inc + 1) // incarnations are counts
		}
		made := IncarnationName(job, inc)
		if strings.ContainsRune(made, '/') || made == "." || made == ".." {
			t.Fatalf("IncarnationName(%q, %d) = %q: not one directory", job, inc, made)
		}
		pj, pi, ok := parseIncarnation(made)
		if !ok || pi != inc || IncarnationName(pj, pi) != made {
			t.Fatalf("IncarnationName(%q, %d) = %q reads back as %q, %d, %v", job, inc, made, pj, pi, ok)
		}
		if job != "" && strings.Trim(job, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == "" && pj != job {
			t.Fatalf("job %q, safe already, reads back as %q", job, pj)
		}
		if pj, pi, ok := parseIncarnation(name); ok && IncarnationName(pj, pi) != name {
			t.Fatalf("%q parses as incarnation %d of %q, whose name is %q", name, pi, pj, IncarnationName(pj, pi))
		}
	})
}

// FuzzOurs: a dump's name and its twins are ours and read back as their
// rank and world; any name ours takes is one of those, spelled exactly.
func FuzzOurs(f *testing.F) {
	for _, s := range []string{"00001-00004.stacktrace", "00001-00004.txt", "00001-00004.trace.json", "000001-00004.stacktrace",
		"a/00001-00004.stacktrace", "notes.txt", "00004-00004.stacktrace", "+0001-00004.txt"} {
		f.Add(1, 4, s)
	}
	f.Fuzz(func(t *testing.T, rank, world int, name string) {
		if rank >= 0 && world > rank {
			stem := strings.TrimSuffix(dumpfile.Name(rank, world), dumpfile.Ext)
			for _, ext := range []string{dumpfile.Ext, dumpfile.TextExt, trace.Ext} {
				if !ours(stem + ext) {
					t.Fatalf("%q is ours but not taken for ours", stem+ext)
				}
			}
			if r, w, ok := dumpfile.ParseName(dumpfile.Name(rank, world)); !ok || r != rank || w != world {
				t.Fatalf("Name(%d, %d) reads back as %d, %d, %v", rank, world, r, w, ok)
			}
		}
		if ours(name) && !ourName(name) {
			t.Fatalf("ours(%q), and no dump, text or trace name is spelled so", name)
		}
	})
}

// ourName says, from the writers' names alone, whether name is a dump's,
// its text twin's or its trace's.
func ourName(name string) bool {
	for _, ext := range []string{dumpfile.Ext, dumpfile.TextExt, trace.Ext} {
		stem, ok := strings.CutSuffix(name, ext)
		if !ok {
			continue
		}
		if r, w, ok := dumpfile.ParseName(stem + dumpfile.Ext); ok && dumpfile.Name(r, w) == stem+dumpfile.Ext && trace.Name(r, w) == stem+trace.Ext {
			return true
		}
	}
	return false
}

// FuzzRetainSelects: in a directory holding one incarnation directory and
// one file of any names, with a stranger's file beside it and a current
// dump above, retention with everything expired removes the file exactly
// when both names are ours, and nothing else.
func FuzzRetainSelects(f *testing.F) {
	f.Add("llama.3", "00001-00004.stacktrace")
	f.Add("llama.03", "00001-00004.txt")
	f.Add("default.0", "000001-00004.stacktrace")
	f.Add("..0", "00000-00001.trace.json")
	f.Add("a b.1", "00000-00001.stacktrace")
	f.Fuzz(func(t *testing.T, dirName, fileName string) {
		if !oneName(dirName) || !oneName(fileName) || dirName == "notours" {
			return
		}
		dir := t.TempDir()
		inc := filepath.Join(dir, IncarnationsDir, dirName)
		if err := os.MkdirAll(inc, 0o755); err != nil {
			return // a name this file system refuses
		}
		var keep []string
		for _, p := range []string{filepath.Join(dir, "00000-00001.stacktrace"), filepath.Join(inc, "notours"), filepath.Join(dir, IncarnationsDir, "stray.txt")} {
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
			keep = append(keep, p)
		}
		target := filepath.Join(inc, fileName)
		if err := os.WriteFile(target, []byte("x"), 0o644); err != nil {
			return
		}
		res := Retain(context.Background(), dir, Retention{Age: time.Nanosecond}, nil, time.Now().Add(time.Hour))
		pj, pi, ok := parseIncarnation(dirName)
		want := ok && IncarnationName(pj, pi) == dirName && ourName(fileName)
		if got := !exists(target); got != want {
			t.Fatalf("incarnations/%s/%s removed %v, want %v (%+v)", dirName, fileName, got, want, res)
		}
		for _, p := range keep {
			if !exists(p) {
				t.Fatalf("%s removed", p)
			}
		}
	})
}

// oneName says whether s names one entry of a directory.
func oneName(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00") && len(s) < 200
}

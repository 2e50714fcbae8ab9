package procfs

import (
	"bytes"
	"cmp"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// A path that also appears earlier in the line (here "0", the inode) was
// cut from its first occurrence, making the whole line the path.
func TestParseMapsPathRepeated(t *testing.T) {
	for _, tc := range []struct{ line, path string }{
		{"00400000-00452000 r-xp 00000000 08:02 0 0", "0"},
		{"00400000-00452000 r-xp 00000000 08:02 173521 r-xp", "r-xp"},
		{"00400000-00452000 r-xp 00000000 08:02 173521\t /a b ", "/a b "},
	} {
		ms, err := ParseMaps([]byte(tc.line))
		if err != nil || len(ms) != 1 || ms[0].Path != tc.path {
			t.Errorf("ParseMaps(%q) = %+v, %v; want path %q", tc.line, ms, err, tc.path)
		}
	}
	if _, err := ParseMaps([]byte("00452000-00400000 r-xp 00000000 08:02 1 /x")); err == nil {
		t.Error("a range that ends before it starts was taken")
	}
}

func TestParseEnvironCmdlineChildren(t *testing.T) {
	env := ParseEnviron([]byte("A=1\x00B=x=y\x00junk\x00A=2\x00"))
	if len(env) != 2 || env["A"] != "2" || env["B"] != "x=y" {
		t.Errorf("ParseEnviron = %v", env)
	}
	if got := ParseCmdline([]byte("python\x00-c\x00\x00x\x00\x00")); strings.Join(got, "|") != "python|-c||x" {
		t.Errorf("ParseCmdline = %q", got)
	}
	if got := ParseChildren([]byte("12 7 -3 0 x 99999999999999999999 5\n")); len(got) != 3 || got[0] != 12 || got[1] != 7 || got[2] != 5 {
		t.Errorf("ParseChildren = %v", got)
	}
}

func FuzzParseMaps(f *testing.F) {
	f.Add([]byte("7f0000001000-7f0000002000 r-xp 00001000 fd:01 1234   /usr/lib/my lib.so (deleted)\n7ffd00000000-7ffd00001000 r-xp 00000000 00:00 0 [vdso]\n"))
	f.Add([]byte("00400000-00401000 rw-p 00000000 00:00 0 \n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ms, err := ParseMaps(b)
		if err != nil {
			return
		}
		for i, m := range ms {
			if m.End < m.Start || i > 0 && ms[i-1].Start > m.Start {
				t.Fatalf("mapping %d: %+v", i, m)
			}
			if strings.Contains(m.Path, "\n") {
				t.Fatalf("path %q holds a newline", m.Path)
			}
		}
	})
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("42 (a (b) c) D 1 40 40 0 -1 4194560 0 0"))
	f.Add([]byte("1 (x) S 0 1 1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseStat(b)
		if err != nil {
			return
		}
		if !bytes.Contains(b, []byte("("+s.Comm+")")) || !strings.Contains(string(b), strconv.Itoa(s.PID)) {
			t.Fatalf("ParseStat(%q) = %+v", b, s)
		}
		_ = StateName(s.State)
	})
}

func FuzzParseEnviron(f *testing.F) {
	f.Add([]byte("A=1\x00B=x=y\x00junk\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for k, v := range ParseEnviron(b) {
			if strings.ContainsRune(k, '=') || strings.ContainsRune(k+v, 0) {
				t.Fatalf("entry %q=%q", k, v)
			}
		}
	})
}

func FuzzParseCmdline(f *testing.F) {
	f.Add([]byte("python\x00-c\x00\x00x\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		args := ParseCmdline(b)
		if j := strings.Join(args, "\x00"); j != strings.TrimRight(string(b), "\x00") {
			t.Fatalf("ParseCmdline(%q) = %q", b, args)
		}
	})
}

func FuzzParseChildren(f *testing.F) {
	f.Add([]byte("12 7 5\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, c := range ParseChildren(b) {
			if c <= 0 {
				t.Fatalf("ParseChildren(%q) holds %d", b, c)
			}
		}
	})
}

// The fast parse of a line gives what the reference parse gives, or
// leaves the line to it.
func FuzzParseMapsLineFast(f *testing.F) {
	f.Add([]byte("7f0000001000-7f0000002000 r-xp 00001000 fd:01 1234   /usr/lib/my lib.so (deleted)"))
	f.Add([]byte("00400000-00401000 rw-p 00000000 00:00 0 "))
	f.Add([]byte("00400000-00401000\trw-p 0 00:00 0\t[heap] "))
	f.Add([]byte("ffffffffffffffff-10000000000000000 r-xp 0 0 0 /x"))
	f.Add([]byte("00400000-00401000 rw-p 00000000 00:00 0 /caf\xc3\xa9"))
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.IndexByte(line, '\n') >= 0 {
			return
		}
		m, ok := parseMapsLineFast(line, map[string]string{})
		if !ok {
			return
		}
		want, err := parseMapsLine(string(line))
		if err != nil || m != want {
			t.Fatalf("%q: fast %+v, reference %+v, %v", line, m, want, err)
		}
	})
}

// A live process's maps parse as the reference parses each line.
func TestParseMapsAsReference(t *testing.T) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	b = append(b, "00400000-00401000 rw-p 00000000 00:00 0 /caf\xc3\xa9 (deleted)\n"...)
	got, err := ParseMaps(b)
	if err != nil {
		t.Fatal(err)
	}
	var want []Mapping
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		m, err := parseMapsLine(line)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, m)
	}
	slices.SortStableFunc(want, func(a, b Mapping) int { return cmp.Compare(a.Start, b.Start) })
	if len(got) < 10 || !slices.Equal(got, want) {
		t.Fatalf("ParseMaps: %d mappings, the reference %d, or they differ", len(got), len(want))
	}
}

package python

import (
	"encoding/binary"
	"errors"
	"regexp"
	"testing"
)

func TestHexVersion(t *testing.T) {
	for v, want := range map[uint64]string{
		0x030b07f0: "3.11.7",
		0x030d00f0: "3.13.0",
		0x030e00a3: "3.14.0a3",
		0x030c00c1: "3.12.0rc1",
	} {
		if got := hexVersion(v); got != want {
			t.Errorf("hexVersion(%#x) = %q, want %q", v, got, want)
		}
	}
}

func TestDecodeUnicode(t *testing.T) {
	for _, tc := range []struct {
		data []byte
		kind int64
		want string
	}{
		{[]byte("abc"), 1, "abc"},
		{[]byte{'g', 'r', 0xfc, 0xdf, 'e'}, 1, "grüße"},
		{[]byte{0x70, 0x65, 0x6e, 0x63}, 2, "数据"},
		{[]byte{0x00, 0xf6, 0x01, 0x00}, 4, "😀"},
	} {
		if got := decodeUnicode(tc.data, tc.kind); got != tc.want {
			t.Errorf("decodeUnicode(% x, %d) = %q, want %q", tc.data, tc.kind, got, tc.want)
		}
	}
}

// debugOffsets builds a 3.13 _Py_DebugOffsets table with word i = i*8+8,
// except the words set by the caller.
func debugOffsets(set map[int]uint64) []byte {
	b := make([]byte, debugOffsetsSize)
	copy(b, "xdebugpy")
	for i := 1; i < debugOffsetsSize/8; i++ {
		v, ok := set[i]
		if !ok {
			v = uint64(i*8 + 8)
		}
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return b
}

func TestParseDebugOffsets(t *testing.T) {
	l, v, err := parseDebugOffsets(debugOffsets(map[int]uint64{1: 0x030d00f0, 2: 0}))
	if err != nil || v != 0x030d00f0 {
		t.Fatalf("parse: %v %#x", err, v)
	}
	// Spot checks against the word order of pycore_runtime.h (3.13).
	if l.runtimeInterpHead != 5*8+8 || l.tsFrame != 23*8+8 || l.codeCodeAdaptive != 43*8+8 || l.asciiSize != 70*8+8 || l.compactSize != l.asciiSize+16 {
		t.Errorf("layout %+v", l)
	}
	for name, tc := range map[string]struct {
		b    []byte
		want error
	}{
		"no cookie":     {make([]byte, debugOffsetsSize), errInconsistent},
		"short":         {debugOffsets(map[int]uint64{1: 0x030d00f0, 2: 0})[:100], errInconsistent},
		"3.14":          {debugOffsets(map[int]uint64{1: 0x030e00f0, 2: 0}), ErrUnsupported},
		"free-threaded": {debugOffsets(map[int]uint64{1: 0x030d00f0, 2: 1}), ErrUnsupported},
		"bad offset":    {debugOffsets(map[int]uint64{1: 0x030d00f0, 2: 0, 9: 1 << 40}), errInconsistent},
		"huge block":    {debugOffsets(map[int]uint64{1: 0x030d00f0, 2: 0, 21: 1 << 16}), errInconsistent},
	} {
		if _, _, err := parseDebugOffsets(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
}

// FuzzParseDebugOffsets: the table comes from another process's memory.
func FuzzParseDebugOffsets(f *testing.F) {
	f.Add(debugOffsets(map[int]uint64{1: 0x030d00f0, 2: 0}))
	f.Add([]byte("xdebugpy"))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, _, err := parseDebugOffsets(b)
		if err == nil && (l.minor != 13 || threadSize(l) > 1<<13 || l.compactSize > 1<<13) {
			t.Fatalf("accepted bad layout %+v", l)
		}
	})
}

// TestVersionParsers checks the hand-written version parsers against the
// regular expressions they stand for, on versions as interpreters and
// file names give them and on near misses.
func TestVersionParsers(t *testing.T) {
	prefix := regexp.MustCompile(`^3\.\d+\.\d+(?:(?:a|b|rc)\d+)?\+?`)
	for _, s := range []string{
		"3.9.18 (main, Jun  1 2024) [GCC 12]", "3.11.2", "3.13.0rc1", "3.13.0rc1+ (heads/3.13:abc)",
		"3.12.0a7", "3.12.0b12+", "3.12.0c1", "3.12.0rc", "3.12.0+rc1", "3.12.", "3.12", "3..1", "3.x.1",
		"2.7.18", "", "3", "3.", "33.1.1", "3.10.11\x00junk", "3.10.11a", "3.10.11b+",
	} {
		if got, want := string(versionPrefix([]byte(s))), prefix.FindString(s); got != want {
			t.Errorf("versionPrefix(%q) = %q, the expression finds %q", s, got, want)
		}
	}
	name := regexp.MustCompile(`python(3)\.(\d+)`)
	for _, s := range []string{
		"libpython3.11.so.1.0", "python3.9", "python3.13d", "python3", "python3.", "python3.x-python3.12",
		"libpython3.so", "python2.7", "", "pythonpython3.10", "python3.python3.8",
	} {
		want := ""
		if m := name.FindStringSubmatch(s); m != nil {
			want = m[1] + "." + m[2]
		}
		if got := nameVersion(s); got != want {
			t.Errorf("nameVersion(%q) = %q, the expression finds %q", s, got, want)
		}
	}
}

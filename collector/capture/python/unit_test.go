package python

import (
	"encoding/binary"
	"errors"
	"fmt"
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

// realDebugOffsets are the _Py_DebugOffsets tables, words 1 on (word 0 is
// the cookie), of CPython 3.13.0 (pyenv), and of Debian sid's 3.14.10 and
// 3.15.2, as their ELF files hold them in _PyRuntime.
var realDebugOffsets = map[string][]uint64{
	"3.13.0": {
		51183856, 0, 283320, 608, 632, 194968, 7272, 7264, 7344, 7400, 7656, 7640, 7648, 16, 7752, 0,
		7768, 7760, 304, 0, 8, 16, 72, 152, 160, 232, 32, 80, 8, 0, 56, 72, 70, 208, 112, 120, 128, 136,
		68, 52, 96, 104, 200, 16, 8, 416, 24, 88, 168, 32, 24, 16, 40, 24, 16, 48, 32, 40, 24, 16, 32,
		16, 24, 40, 16, 32, 64, 32, 16, 40, 240, 200,
	},
	"3.14.10": {
		51251952, 0, 316616, 784, 808, 225864, 7280, 7272, 7344, 7360, 7408, 7688, 7672, 7680, 16, 7784,
		0, 7800, 7792, 7992, 0, 832, 0, 8, 16, 72, 152, 160, 232, 32, 88, 8, 0, 56, 80, 74, 64, 0, 216,
		112, 120, 128, 136, 68, 52, 96, 104, 208, 0, 16, 8, 416, 24, 88, 168, 40, 32, 16, 40, 24, 16,
		200, 24, 40, 32, 48, 32, 40, 24, 16, 32, 16, 24, 40, 16, 32, 64, 32, 16, 40, 264, 192, 160, 24,
		72, 67, 0, 8, 24, 304, 8076, 0, 4, 512,
	},
	"3.15.2": {
		51315440, 0, 346568, 912, 936, 226240, 7272, 7264, 7336, 7352, 7400, 7592, 7576, 7584, 16, 7736,
		0, 7752, 7744, 7944, 0, 888, 0, 8, 16, 72, 80, 88, 96, 176, 184, 256, 32, 36, 40, 136, 288, 0,
		88, 8, 0, 56, 80, 74, 64, 0, 216, 112, 120, 128, 136, 68, 52, 96, 104, 208, 0, 16, 8, 424, 24,
		88, 168, 32, 288, 944, 888, 40, 32, 16, 40, 24, 16, 200, 24, 40, 32, 48, 32, 40, 24, 16, 32, 16,
		24, 40, 16, 32, 64, 32, 16, 40,
	},
}

// debugOffsets builds the _Py_DebugOffsets table of a version from
// realDebugOffsets, with the words set by the caller changed.
func debugOffsets(version string, set map[int]uint64) []byte {
	b := make([]byte, debugOffsetsSize)
	copy(b, "xdebugpy")
	for i, v := range realDebugOffsets[version] {
		binary.LittleEndian.PutUint64(b[8*(i+1):], v)
	}
	for i, v := range set {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return b
}

// TestParseDebugOffsets reads the tables of 3.13, 3.14 and 3.15 into the
// offsets their headers give (3.14 and 3.15: as TestMatchesFaulthandler
// confirms on the running interpreters).
func TestParseDebugOffsets(t *testing.T) {
	for version, want := range map[string]layout{
		"3.13.0": {minor: 13, runtimeInterpHead: 632, interpThreads: 7344, interpGILHolder: 7760, tsNext: 8,
			tsFrame: 72, tsThreadID: 152, tsNativeID: 160, iframeCode: 0, iframeInstr: 56, iframeOwner: 70,
			codeName: 120, codeLinetable: 136, codeCodeAdaptive: 200, asciiSize: 40, compactSize: 56},
		"3.14.10": {minor: 14, stackRef: true, runtimeInterpHead: 808, interpThreads: 7344, interpGILHolder: 7792, tsNext: 8,
			tsFrame: 72, tsThreadID: 152, tsNativeID: 160, iframeCode: 0, iframeInstr: 56, iframeOwner: 74,
			codeName: 120, codeLinetable: 136, codeCodeAdaptive: 208, asciiSize: 40, compactSize: 56},
		"3.15.2": {minor: 15, stackRef: true, runtimeInterpHead: 936, interpThreads: 7336, interpGILHolder: 7744, tsNext: 8,
			tsFrame: 72, tsThreadID: 176, tsNativeID: 184, iframeCode: 0, iframeInstr: 56, iframeOwner: 74,
			codeName: 120, codeLinetable: 136, codeCodeAdaptive: 208, asciiSize: 40, compactSize: 56},
	} {
		l, v, err := parseDebugOffsets(debugOffsets(version, nil))
		if err != nil || hexVersion(v) != version {
			t.Fatalf("%s: %v, version %s", version, err, hexVersion(v))
		}
		got := layout{minor: l.minor, stackRef: l.stackRef, runtimeInterpHead: l.runtimeInterpHead, interpThreads: l.interpThreads,
			interpGILHolder: l.interpGILHolder, tsNext: l.tsNext, tsFrame: l.tsFrame, tsThreadID: l.tsThreadID,
			tsNativeID: l.tsNativeID, iframeCode: l.iframeCode, iframeInstr: l.iframeInstr, iframeOwner: l.iframeOwner,
			codeName: l.codeName, codeLinetable: l.codeLinetable, codeCodeAdaptive: l.codeCodeAdaptive,
			asciiSize: l.asciiSize, compactSize: l.compactSize}
		if got != want {
			t.Errorf("%s: layout\n%+v, want\n%+v", version, got, want)
		}
	}
	for name, tc := range map[string]struct {
		b    []byte
		want error
	}{
		"no cookie": {make([]byte, debugOffsetsSize), errInconsistent},
		"short":     {debugOffsets("3.13.0", nil)[:100], errInconsistent},
		"3.12":      {debugOffsets("3.13.0", map[int]uint64{1: 0x030c00f0}), ErrUnsupported},
		"4.0":       {debugOffsets("3.15.2", map[int]uint64{1: 0x040000f0}), ErrUnsupported},
		// A later release whose table grew in the middle: 3.15's read as 3.14's.
		"3.15 as 3.14":  {debugOffsets("3.15.2", map[int]uint64{1: 0x030e00f0}), errUnknownLayout},
		"3.14 as 3.15":  {debugOffsets("3.14.10", map[int]uint64{1: 0x030f00f0}), errUnknownLayout},
		"3.14 as 3.13":  {debugOffsets("3.14.10", map[int]uint64{1: 0x030d00f0}), errUnknownLayout},
		"free-threaded": {debugOffsets("3.14.10", map[int]uint64{2: 1}), errFreeThreaded},
		"bad offset":    {debugOffsets("3.13.0", map[int]uint64{9: 1 << 40}), errUnknownLayout},
		"huge block":    {debugOffsets("3.14.10", map[int]uint64{22: 1 << 16}), errUnknownLayout},
		"past its size": {debugOffsets("3.15.2", map[int]uint64{30: 888}), errUnknownLayout},
	} {
		if _, _, err := parseDebugOffsets(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", name, err, tc.want)
		}
	}
	// A later release with the newest table is read as that.
	if l, v, err := parseDebugOffsets(debugOffsets("3.15.2", map[int]uint64{1: 0x031000a1})); err != nil || l.minor != 16 || hexVersion(v) != "3.16.0a1" || l.tsThreadID != 176 {
		t.Errorf("3.16.0a1 with 3.15's table: %v, %+v", err, l)
	}
}

// TestUnreadError: the line a dump carries for an interpreter not read.
func TestUnreadError(t *testing.T) {
	for _, tc := range []struct {
		err  *UnreadError
		want string
	}{
		{&UnreadError{Version: "3.16.0a1", Err: fmt.Errorf("parse: %w", errUnknownLayout)}, "Python 3.16.0a1: frames not read: unknown layout"},
		{&UnreadError{Version: "3.14.10", Err: fmt.Errorf("parse: %w", errFreeThreaded)}, "Python 3.14.10: frames not read: free-threaded build"},
		{&UnreadError{Version: "3.8", Err: errUnknownLayout}, "Python 3.8: frames not read: unknown layout"},
		{&UnreadError{Err: errUnknownLayout}, "Python (version unknown): frames not read: unknown layout"},
	} {
		if got := tc.err.Error(); got != tc.want || !errors.Is(tc.err, ErrUnsupported) {
			t.Errorf("%q (is ErrUnsupported: %v), want %q", got, errors.Is(tc.err, ErrUnsupported), tc.want)
		}
	}
}

// FuzzParseDebugOffsets: the table comes from another process's memory.
func FuzzParseDebugOffsets(f *testing.F) {
	for v := range realDebugOffsets {
		f.Add(debugOffsets(v, nil))
	}
	f.Add([]byte("xdebugpy"))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, _, err := parseDebugOffsets(b)
		if err == nil && (l.minor < 13 || threadSize(l) > 1<<13 || l.compactSize > 1<<13) {
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

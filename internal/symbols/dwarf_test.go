package symbols

import (
	"bytes"
	"compress/zlib"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/inflate"
	"github.com/xpu-timer/xpu-timer/internal/rawfile"
)

// zlibOf compresses b.
func zlibOf(t *testing.T, b []byte) []byte {
	t.Helper()
	var z bytes.Buffer
	w := zlib.NewWriter(&z)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return z.Bytes()
}

// textLike is n bytes that compress about as DWARF does.
func textLike(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	words := []string{"DW_TAG_subprogram", "pthread_cond_wait", "futex", "start_thread", "\x00\x01\x02", "clone3"}
	var b []byte
	for len(b) < n {
		b = append(b, words[r.IntN(len(words))]...)
		b = append(b, byte(r.IntN(256)))
	}
	return b[:n]
}

// A section read ahead on another goroutine gives, at each read, the bytes
// asked for, and all of them at the end; a corrupt one an error at the
// point where it breaks, and from then on.
func TestReadAhead(t *testing.T) {
	want := textLike(3 << 20)
	z := zlibOf(t, want)
	open := func(z []byte) *section {
		s := &section{b: make([]byte, len(want)+1), size: len(want)}
		d, err := inflate.NewZlib(z, s.b[:len(want)])
		if err != nil {
			t.Fatal(err)
		}
		s.fill = d.Fill
		s.readAhead()
		if s.ahead == nil {
			t.Fatal("not read ahead")
		}
		return s
	}
	s := open(z)
	for _, to := range []int{1, 1000, readChunk + 1, 2 << 20, len(want) - 1, len(want)} {
		if err := s.read(to); err != nil {
			t.Fatalf("read(%d): %v", to, err)
		}
		if s.n < to || !bytes.Equal(s.b[:s.n], want[:s.n]) {
			t.Fatalf("read(%d): %d bytes, equal %v", to, s.n, bytes.Equal(s.b[:s.n], want[:s.n]))
		}
	}
	if s.ahead != nil || s.fill != nil || s.b[len(want)] != 0 {
		t.Errorf("after the whole: ahead %v, fill set %v, zero after %v", s.ahead != nil, s.fill != nil, s.b[len(want)] == 0)
	}

	bad := bytes.Clone(z)
	bad[len(bad)/2] ^= 0xff
	s = open(bad)
	if err := s.read(len(want)); err == nil {
		t.Fatal("corrupt stream read whole without error")
	}
	if err := s.read(len(want)); err == nil {
		t.Fatal("second read of a corrupt stream: no error")
	}
}

// A mapped stream whose file is truncated under it gives an error, not a
// crash (SIGBUS).
func TestMappedStreamTruncated(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("mapFile maps on Linux only")
	}
	want := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(3, 4))
	for i := range want {
		want[i] = byte(r.Uint32()) // incompressible: a stream of over 1 MB
	}
	z := zlibOf(t, want)
	path := filepath.Join(t.TempDir(), "stream")
	const off = 12345
	if err := os.WriteFile(path, append(make([]byte, off), z...), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := rawfile.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	raw, unmap := mapFile(f, off, len(z), true)
	if raw == nil {
		t.Fatal("not mapped")
	}
	defer unmap()
	if !bytes.Equal(raw, z) {
		t.Fatal("mapped bytes differ from the file's")
	}
	out := make([]byte, len(want))
	d, err := inflate.NewZlib(raw, out)
	if err != nil {
		t.Fatal(err)
	}
	fill := faultSafe(d)
	if n, err := fill(100 << 10); err != nil || !bytes.Equal(out[:n], want[:n]) {
		t.Fatalf("before truncation: %d bytes, %v", n, err)
	}
	if err := os.Truncate(path, 4096); err != nil {
		t.Fatal(err)
	}
	n, err := fill(len(want))
	if err == nil {
		t.Fatal("read past the truncated end without error")
	}
	if !bytes.Equal(out[:n], want[:n]) {
		t.Errorf("the %d bytes decoded before the fault differ", n)
	}
	t.Logf("after truncation: %d bytes, %v", n, err)
}

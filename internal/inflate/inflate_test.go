package inflate

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"testing"
	"time"
)

// compress returns data compressed by compress/zlib at level.
func compress(t testing.TB, data []byte, level int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := zlib.NewWriterLevel(&buf, level)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// inputs are data of every kind of block: text-like runs, random bytes
// (stored blocks), long repeats (overlapping matches), empty.
func inputs(t testing.TB) map[string][]byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 200<<10)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	words := []string{"DW_TAG_subprogram", "pthread_cond_wait", "\x00\x01\x02", "nptl/futex-internal.c", "\xff\xfe", " ", "libc"}
	var text []byte
	for len(text) < 1<<20 {
		text = append(text, words[rng.IntN(len(words))]...)
		if rng.IntN(8) == 0 {
			text = append(text, byte(rng.Uint32()))
		}
	}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		"empty":  {},
		"byte":   {42},
		"random": random,
		"text":   text,
		"repeat": bytes.Repeat([]byte("ab"), 100000),
		"zeros":  make([]byte, 300000),
		"binary": self[:min(len(self), 4<<20)],
	}
}

func TestRoundTrip(t *testing.T) {
	for name, data := range inputs(t) {
		for _, level := range []int{flate.NoCompression, flate.BestSpeed, flate.DefaultCompression, flate.BestCompression, flate.HuffmanOnly} {
			z := compress(t, data, level)
			out := make([]byte, len(data))
			d, err := NewZlib(z, out)
			if err != nil {
				t.Fatalf("%s level %d: %v", name, level, err)
			}
			if n, err := d.Fill(len(out)); err != nil || n != len(data) || !bytes.Equal(out, data) {
				t.Fatalf("%s level %d: %d bytes, %v; equal %v", name, level, n, err, bytes.Equal(out, data))
			}
		}
	}
}

// TestFixed decodes a block of fixed codes, which compress/flate writes
// for short inputs.
func TestFixed(t *testing.T) {
	data := []byte("hello, hello, hello world\n")
	z := compress(t, data, flate.BestCompression)
	if z[2]&6 != 2 {
		t.Fatalf("block type %d, want fixed codes (1)", z[2]>>1&3)
	}
	out := make([]byte, len(data))
	d, _ := NewZlib(z, out)
	if _, err := d.Fill(len(out)); err != nil || string(out) != string(data) {
		t.Fatalf("%q, %v", out, err)
	}
}

// TestFillAsFar decodes in steps, each at least as far as asked and never
// wrong about how far.
func TestFillAsFar(t *testing.T) {
	data := bytes.ReplaceAll(inputs(t)["text"], []byte{0}, []byte{1}) // no zero bytes
	z := compress(t, data, flate.DefaultCompression)
	out := make([]byte, len(data))
	d, _ := NewZlib(z, out)
	for want := 1; ; want += 70000 {
		n, err := d.Fill(want)
		if err != nil {
			t.Fatal(err)
		}
		if n < min(want, len(data)) || n != d.Filled() || !bytes.Equal(out[:n], data[:n]) {
			t.Fatalf("asked %d: filled %d, equal %v", want, n, bytes.Equal(out[:n], data[:n]))
		}
		if i := bytes.IndexFunc(out[n:], func(r rune) bool { return r != 0 }); i >= 0 {
			t.Fatalf("asked %d: filled %d, and byte %d after is not zero", want, n, i)
		}
		if n == len(data) {
			break
		}
		if want == 1 && n == len(data) {
			t.Fatal("asked for 1 byte: decoded all")
		}
	}
}

// TestBadInput: every truncation, a wrong size, a flipped bit, a wrong
// checksum and a bad header each give an error (or, for a flipped bit,
// possibly the right bytes by luck), never a panic.
func TestBadInput(t *testing.T) {
	data := inputs(t)["text"][:100000]
	z := compress(t, data, flate.DefaultCompression)
	fill := func(z []byte, size int) error {
		d, err := NewZlib(z, make([]byte, size))
		if err != nil {
			return err
		}
		_, err = d.Fill(size)
		return err
	}
	for cut := 0; cut < len(z); cut += 1 + cut/16 {
		if err := fill(z[:cut], len(data)); err == nil {
			t.Fatalf("cut at %d of %d: no error", cut, len(z))
		}
	}
	for _, size := range []int{0, len(data) - 1, len(data) + 1} {
		if err := fill(z, size); !errors.Is(err, ErrCorrupt) {
			t.Errorf("size %d of %d: %v, want ErrCorrupt", size, len(data), err)
		}
	}
	bad := bytes.Clone(z)
	bad[len(bad)-1] ^= 1
	if err := fill(bad, len(data)); !errors.Is(err, ErrCorrupt) {
		t.Errorf("wrong checksum: %v", err)
	}
	for _, hdr := range [][]byte{{0x78, 0x9d}, {0x79, 0x9c}, {0x78, 0xbb}} {
		if err := fill(append(hdr, z[2:]...), len(data)); !errors.Is(err, ErrCorrupt) {
			t.Errorf("header % x: %v", hdr, err)
		}
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 2000 {
		bad := bytes.Clone(z)
		bad[2+rng.IntN(len(bad)-2)] ^= 1 << rng.IntN(8)
		out := make([]byte, len(data))
		d, _ := NewZlib(bad, out)
		if _, err := d.Fill(len(out)); err == nil && !bytes.Equal(out, data) {
			t.Fatal("a flipped bit decoded to other bytes without an error")
		}
	}
	// Sticky: the error again, and no further decoding.
	d, _ := NewZlib(z[:len(z)/2], make([]byte, len(data)))
	_, err1 := d.Fill(len(data))
	n, err2 := d.Fill(len(data))
	if err1 == nil || err2 != err1 || n != d.Filled() {
		t.Errorf("errors %v then %v", err1, err2)
	}
}

// FuzzInflate: wherever compress/zlib decodes a stream, we decode it to
// the same bytes; anything else fails without a panic.
func FuzzInflate(f *testing.F) {
	for _, data := range [][]byte{[]byte("hello, hello, hello"), bytes.Repeat([]byte{7}, 1000), nil} {
		for _, level := range []int{0, 1, 6, 9, -2} {
			f.Add(compress(f, data, level))
		}
	}
	f.Fuzz(func(t *testing.T, z []byte) {
		r, err := zlib.NewReader(bytes.NewReader(z))
		var want []byte
		if err == nil {
			want, err = io.ReadAll(io.LimitReader(r, 1<<20))
		}
		size := len(want)
		if err != nil {
			size = 1 << 10
		}
		out := make([]byte, size)
		d, derr := NewZlib(z, out)
		if derr == nil {
			_, derr = d.Fill(size)
		}
		if err == nil && (derr != nil || !bytes.Equal(out, want)) {
			t.Fatalf("compress/zlib decodes %d bytes; we: %v, equal %v", len(want), derr, bytes.Equal(out, want))
		}
	})
}

// BenchmarkInflate decodes a zlib stream of this test binary (code and
// data as compressible as a library's debug information) with Decoder
// and with compress/zlib, and reports the speed ratio.
func BenchmarkInflate(b *testing.B) {
	data := inputs(b)["binary"]
	z := compress(b, data, flate.DefaultCompression)
	out := make([]byte, len(data))
	var ours, std float64
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		ours += measure(func() {
			d, _ := NewZlib(z, out)
			if _, err := d.Fill(len(out)); err != nil {
				b.Fatal(err)
			}
		})
		std += measure(func() {
			r, _ := zlib.NewReader(bytes.NewReader(z))
			if _, err := io.ReadFull(r, out); err != nil {
				b.Fatal(err)
			}
		})
	}
	b.ReportMetric(std/ours, "speedup")
}

// measure returns how long f takes, in seconds.
func measure(f func()) float64 {
	begin := time.Now()
	f()
	return time.Since(begin).Seconds()
}

package protodump

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
)

// The encoder below writes messages the way protoc's output does, to test
// the reader against the wire format rather than against itself.

func tag(num, wt int) []byte { return uvarint(uint64(num<<3 | wt)) }

func uvarint(v uint64) []byte {
	var b []byte
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func str(num int, s string) []byte { return msg(num, []byte(s)) }

func msg(num int, body []byte) []byte {
	b := append(tag(num, int(protowire.BytesType)), uvarint(uint64(len(body)))...)
	return append(b, body...)
}

func num(n int, v uint64) []byte { return append(tag(n, int(protowire.VarintType)), uvarint(v)...) }

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// example is rank 2 of xpu_timer's dump of a job: its main thread (LWP
// 4242) sleeps in Python, a gloo thread waits.
func example() []byte {
	gdbMain := cat(num(1, 4242), str(2, `Thread 0x7f00 (LWP 4242) "python3"`),
		msg(3, cat(str(1, "clock_nanosleep@GLIBC_2.2.5"), str(2, "from /lib/x86_64-linux-gnu/libc.so.6"), str(3, "#0 ..."))),
		msg(3, cat(str(1, "_PyEval_EvalFrameDefault"), str(2, "from /usr/lib/libpython3.11.so.1.0"))),
		msg(3, cat(str(1, "main"), str(2, "at main.c:12"))))
	gdbGloo := cat(num(1, 4250), str(2, `Thread 0x7f01 (LWP 4250) "python3"`),
		msg(3, cat(str(1, "gloo::transport::tcp::Loop::run"), str(2, "from /usr/lib/libgloo.so.0"))),
		msg(3, cat(str(1, "??"), str(2, "??"))))
	py := cat(num(1, 4242), num(2, 139), str(3, "MainThread"), num(4, 4242), num(5, 1), num(6, 1),
		msg(7, cat(str(1, "stall"), str(2, "/job/train.py:40"), str(3, "train"))),
		msg(7, cat(str(1, "<module>"), str(2, "/job/train.py:90"))))
	return cat(msg(1, gdbMain), msg(1, gdbGloo), msg(2, py), num(3, 4242), num(4, 2),
		str(8, "py-spy: warning"), str(11, "S (sleeping)"), msg(9, nil), []byte{0x61, 1, 2, 3, 4, 5, 6, 7, 8}) // field 12, fixed64: unknown, skipped
}

var update = flag.Bool("update", false, "rewrite testdata")

// sample is the committed copy of example(), the viewer's tests merge it.
var sample = filepath.Join("testdata", "00002-00004.stacktrace")

func TestSample(t *testing.T) {
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(sample, example(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(sample)
	if err != nil || !bytes.Equal(got, example()) {
		t.Errorf("%s differs from example() (go test -update rewrites it): %v", sample, err)
	}
}

func TestParse(t *testing.T) {
	data := example()
	if !Likely(data) {
		t.Fatal("Likely = false")
	}
	f, err := Parse(data, 4)
	if err != nil {
		t.Fatal(err)
	}
	if f.Rank != 2 || f.WorldSize != 4 || f.PID != 4242 || f.State != "S (sleeping)" || len(f.Threads) != 2 {
		t.Fatalf("got %+v", f)
	}
	if len(f.Errors) != 1 || !strings.Contains(f.Errors[0], "py-spy stderr: py-spy: warning") {
		t.Errorf("errors %q", f.Errors)
	}
	m := f.Threads[0]
	if m.TID != 4242 || m.Name != "MainThread" || !m.GIL || len(m.Native) != 3 || len(m.Python) != 2 {
		t.Fatalf("main thread %+v", m)
	}
	want := []stack.Frame{
		{Func: "clock_nanosleep@GLIBC_2.2.5", Module: "/lib/x86_64-linux-gnu/libc.so.6"},
		{Func: "_PyEval_EvalFrameDefault", Module: "/usr/lib/libpython3.11.so.1.0"},
		{Func: "main", File: "main.c", Line: 12},
	}
	for i, w := range want {
		if m.Native[i] != w {
			t.Errorf("native %d: %+v, want %+v", i, m.Native[i], w)
		}
	}
	if p := m.Python[0]; p != (stack.Frame{Func: "stall", File: "/job/train.py", Line: 40, Module: "python"}) {
		t.Errorf("python 0: %+v", p)
	}
	// Merged: the eval frame replaced by the Python frames it ran.
	if len(m.Merged) != 4 || m.Merged[1].Func != "stall" || m.Merged[2].Func != "<module>" {
		t.Errorf("merged %+v", m.Merged)
	}
	g := f.Threads[1]
	if g.TID != 4250 || g.Name != "python3" || g.Native[1] != (stack.Frame{Func: "??"}) {
		t.Errorf("gloo thread %+v", g)
	}
}

func TestMalformed(t *testing.T) {
	good := example()
	for name, data := range map[string][]byte{
		"cut short":      good[:len(good)-20],
		"length too big": cat(tag(1, int(protowire.BytesType)), uvarint(1<<40)),
		"bad varint":     cat(tag(3, int(protowire.VarintType)), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}),
		"group":          cat(tag(1, 3)),
		"field zero":     {0x02, 0x00},
		"reserved type":  cat(tag(2, 6)),
		"fixed32 short":  cat(tag(2, int(protowire.Fixed32Type)), []byte{1, 2}),
		"rank outside":   num(4, 9),
		"negative rank":  num(4, 1<<64-1),
	} {
		if _, err := Parse(data, 4); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	if Likely([]byte("{\"schema\"")) || Likely(nil) {
		t.Error("Likely on JSON or nothing")
	}
}

func FuzzParse(f *testing.F) {
	f.Add(example())
	f.Add([]byte{0x0a, 0x02, 0x08, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse(data, 8)
		if err == nil && (file.Rank < 0 || file.Rank >= 8) {
			t.Fatalf("rank %d accepted", file.Rank)
		}
	})
}

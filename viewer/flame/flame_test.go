package flame

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/viewer/rankset"
)

var update = flag.Bool("update", false, "rewrite golden files")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestFrameKey(t *testing.T) {
	for _, tc := range []struct {
		f    stack.Frame
		want string
	}{
		{stack.Frame{Func: "step", File: "/job/train.py", Line: 40, Module: "python"}, "step@/job/train.py:40"},
		{stack.Frame{Func: "ncclAllReduce", Module: "/usr/lib/libnccl.so.2", Addr: 1}, "ncclAllReduce@/usr/lib/libnccl.so.2"},
		{stack.Frame{Func: "gemm", File: "kernels.c", Line: 7, Module: "/x/libfakekernels.so"}, "gemm@kernels.c:7"},
		{stack.Frame{Func: "gemm", File: "kernels.c", Module: "/x/libfakekernels.so"}, "gemm@/x/libfakekernels.so"},
		{stack.Frame{Addr: 0x1234}, "??@??"},
		{stack.Frame{Func: "pthread_cond_wait@@GLIBC_2.3.2", Module: "/lib/libc.so.6"}, "pthread_cond_wait@@GLIBC_2.3.2@/lib/libc.so.6"},
		{stack.Frame{Func: "<module>", File: "x.py", Module: "python"}, "<module>@x.py"},
		// One key on every CPython: 3.11+ dumps before schema 1.1 carry co_qualname.
		{stack.Frame{Func: "Trainer.step", File: "/job/train.py", Line: 40, Module: "python"}, "step@/job/train.py:40"},
		{stack.Frame{Func: "train.<locals>.Trainer.step", File: "/job/train.py", Line: 40, Module: "python"}, "step@/job/train.py:40"},
		{stack.Frame{Func: "<lambda>", File: "x.py", Line: 2, Module: "python"}, "<lambda>@x.py:2"},
		{stack.Frame{Func: "odd.", File: "x.py", Line: 2, Module: "python"}, "odd.@x.py:2"},
		// Native C++ names keep their qualification.
		{stack.Frame{Func: "c10d::Reducer::finalize_backward", Module: "/usr/lib/libtorch_cpu.so"}, "c10d::Reducer::finalize_backward@/usr/lib/libtorch_cpu.so"},
	} {
		if got := FrameKey(&tc.f).String(); got != tc.want {
			t.Errorf("FrameKey(%+v) = %q, want %q", tc.f, got, tc.want)
		}
	}
	if got := StateKey("R (running)").String(); got != "State@R (running)" {
		t.Errorf("StateKey = %q", got)
	}
}

// example is a small job: world 8, rank 5 missing, rank 6 elsewhere.
func example() *Tree {
	t := New(8)
	libc := Key{Func: "pthread_cond_wait@@GLIBC_2.3.2", File: "/lib/x86_64-linux-gnu/libc.so.6"}
	start := Key{Func: "start_thread", File: "/lib/x86_64-linux-gnu/libc.so.6"}
	main := []Key{{Func: "<module>", File: "train.py", Line: 88}, {Func: "step", File: "train.py", Line: 40},
		{Func: "all_reduce", File: "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py", Line: 2050}}
	for _, r := range []int{0, 1, 2, 3, 4, 6, 7} {
		state := "S (sleeping)"
		if r == 6 {
			state = "R (running)"
		}
		t.Add(r, []Key{StateKey(state)})
		if r == 6 {
			t.Add(r, append(main[:2:2], Key{Func: "sleep", File: "train.py", Line: 41}))
		} else {
			t.Add(r, main)
		}
		t.Add(r, []Key{start, {Func: "c10d::ProcessGroupNCCL::watchdog()", File: "/torch/lib/libtorch_cuda.so"}, libc})
		t.Add(r, []Key{start, {Func: "odd;name<&>\"'\n", File: "??"}})
	}
	return t
}

func TestFolded(t *testing.T) {
	for _, w := range []Weight{Stacks, Ranks} {
		tr := example()
		tr.Finish(w)
		var b bytes.Buffer
		if err := tr.WriteFolded(&b); err != nil {
			t.Fatal(err)
		}
		golden(t, "example."+w.String()+".folded", b.Bytes())
		// Every line must parse the way flamegraph.pl and inferno read it:
		// frames split on ";", the count after the last space.
		for _, line := range strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n") {
			i := strings.LastIndexByte(line, ' ')
			if i < 0 {
				t.Fatalf("no count in %q", line)
			}
			for _, frame := range strings.Split(line[:i], ";") {
				l, ok := ParseLabel(frame)
				if !ok {
					t.Errorf("frame %q does not parse", frame)
					continue
				}
				stuck, err1 := rankset.Parse(l.Stuck)
				leak, err2 := rankset.Parse(l.Leak)
				if err1 != nil || err2 != nil || len(stuck)+len(leak) != 8 {
					t.Errorf("frame %q: rank sets %v %v (%v %v) do not cover the world", frame, stuck, leak, err1, err2)
				}
			}
		}
	}
}

func TestWidths(t *testing.T) {
	tr := example()
	tr.Finish(Stacks)
	// Distinct stacks: 2 states + 2 main + watchdog + odd = 6.
	if tr.Root.Value != 6 {
		t.Errorf("stacks weight: root %d, want 6", tr.Root.Value)
	}
	tr = example()
	tr.Finish(Ranks)
	// 7 ranks × 4 stacks each.
	if tr.Root.Value != 28 {
		t.Errorf("ranks weight: root %d, want 28", tr.Root.Value)
	}
	if tr.Label(tr.Root.Children[0]) == "" {
		t.Error("empty label")
	}
}

func TestLabel(t *testing.T) {
	tr := New(8)
	n := tr.Add(0, []Key{StateKey("R (running)")})
	tr.Add(1, []Key{StateKey("R (running)")})
	tr.Add(2, []Key{StateKey("R (running)")})
	tr.Add(6, []Key{StateKey("R (running)")})
	tr.Finish(Stacks)
	if got, want := tr.Label(n), "State@R (running)@0-2/6|3-5/7"; got != want {
		t.Errorf("label %q, want %q", got, want)
	}
	all := New(3)
	m := all.Add(0, []Key{{Func: "f", File: "g"}})
	all.Add(1, []Key{{Func: "f", File: "g"}})
	all.Add(2, []Key{{Func: "f", File: "g"}})
	all.Finish(Stacks)
	if got, want := all.Label(m), "f@g@0-2|"; got != want {
		t.Errorf("label %q, want %q", got, want)
	}
}

func TestComplement(t *testing.T) {
	for _, tc := range []struct {
		ranks []int
		world int
	}{{nil, 0}, {nil, 5}, {[]int{0}, 1}, {[]int{1, 2}, 5}, {[]int{0, 4}, 5}, {[]int{0, 1, 2, 3, 4}, 5}, {[]int{3, 9}, 5}} {
		var want []int
		in := map[int]bool{}
		for _, r := range tc.ranks {
			in[r] = true
		}
		for r := 0; r < tc.world; r++ {
			if !in[r] {
				want = append(want, r)
			}
		}
		if got := string(appendComplement(nil, tc.ranks, tc.world)); got != rankset.Fold(want) {
			t.Errorf("complement of %v in %d = %q, want %q", tc.ranks, tc.world, got, rankset.Fold(want))
		}
	}
}

func TestParseLabel(t *testing.T) {
	for _, tc := range []struct {
		in               string
		fn, file, st, lk string
		ok               bool
	}{
		{"State@R (running)@0-3|4-7", "State", "R (running)", "0-3", "4-7", true},
		{"pthread_cond_wait@@GLIBC_2.3.2@/lib/libc.so.6@0-2/5-7|3-4", "pthread_cond_wait@@GLIBC_2.3.2", "/lib/libc.so.6", "0-2/5-7", "3-4", true},
		{"step@train.py:40@0-7|", "step", "train.py:40", "0-7", "", true},
		{"a@b@|0", "a", "b", "", "0", true},
		{"a@b@0-7", "", "", "", "", false},
		{"a@0|1", "", "", "", "", false},
		{"nothing", "", "", "", "", false},
		{"a@b@x|1", "", "", "", "", false},
	} {
		l, ok := ParseLabel(tc.in)
		if ok != tc.ok || l.Func != tc.fn || l.File != tc.file || l.Stuck != tc.st || l.Leak != tc.lk {
			t.Errorf("ParseLabel(%q) = %+v, %v", tc.in, l, ok)
		}
	}
}

func TestSanitize(t *testing.T) {
	if got := Sanitize("a;b\nc\xff d"); got != "a,b\uFFFDc\uFFFD d" {
		t.Errorf("Sanitize = %q", got)
	}
	if got := Clean("a;b\x7f"); got != "a;b\uFFFD" {
		t.Errorf("Clean = %q", got)
	}
	if got := Clean("ünïcödé"); got != "ünïcödé" {
		t.Errorf("Clean changed valid text: %q", got)
	}
}

// FuzzParseLabel: whatever a label parses to, reassembling it gives the
// label back, and a label built by the tree always parses to its parts.
func FuzzParseLabel(f *testing.F) {
	f.Add("State@R (running)@0-3|4-7", "f@@GLIBC", "file")
	f.Add("a@b@|0", "State", "S (sleeping)")
	f.Fuzz(func(t *testing.T, s, fn, file string) {
		if l, ok := ParseLabel(s); ok {
			if got := l.Func + "@" + l.File + "@" + l.Stuck + "|" + l.Leak; got != s {
				t.Fatalf("ParseLabel(%q) = %+v reassembles to %q", s, l, got)
			}
		}
		if strings.Contains(file, "@") {
			return // ambiguous by the grammar's own rules
		}
		tr := New(4)
		n := tr.Add(1, []Key{{Func: fn, File: file}})
		tr.Finish(Stacks)
		l, ok := ParseLabel(tr.Label(n))
		if !ok || l.Func != fn || l.File != file || l.Stuck != "1" || l.Leak != "0/2-3" {
			t.Fatalf("label %q parsed to %+v, %v", tr.Label(n), l, ok)
		}
	})
}

// A frame reached by every 4th rank of 16,384 has a whole label of 40 KB
// for the folded file; its short label keeps the first runs and counts
// the rest, on both sides of the bar.
func TestShortLabel(t *testing.T) {
	tr := New(16384)
	var n *Node
	for r := range 16384 {
		k := []Key{{Func: "main", File: "job.py"}, {Func: "b", File: "job.py"}}
		if r%4 == 2 {
			k[1].Func = "spin"
		}
		if m := tr.Add(r, k); r == 2 {
			n = m
		}
	}
	tr.Finish(Ranks)
	if got, want := string(tr.AppendShortLabel(nil, n, 3)), "spin@job.py@2/6/10+4093|0-1/3-5/7-9+12280"; got != want {
		t.Errorf("short label %q, want %q", got, want)
	}
	l, ok := ParseLabel(tr.Label(n))
	stuck, err1 := rankset.Parse(l.Stuck)
	leak, err2 := rankset.Parse(l.Leak)
	if !ok || err1 != nil || err2 != nil || len(stuck) != 4096 || len(leak) != 12288 {
		t.Errorf("whole label: parsed %v, %d and %d ranks (%v, %v), want 4096 and 12288", ok, len(stuck), len(leak), err1, err2)
	}
}

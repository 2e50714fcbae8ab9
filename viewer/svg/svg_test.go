package svg

import (
	"bytes"
	"encoding/xml"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/viewer/flame"
)

var update = flag.Bool("update", false, "rewrite golden files")

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

// hostile names: markup, entities, quotes, CDATA ends, control characters,
// invalid UTF-8 and non-ASCII.
var hostile = []string{
	`</title></g><script>alert(1)</script>`,
	`operator<<(std::ostream&, "x")`,
	`a]]>b`,
	"ctl\x00\x01\x1b[31m\x7f",
	"bad\xff\xfeutf8",
	"日本語 ünïcödé 🙂",
	`'single' & "double"`,
}

func tree(w flame.Weight) *flame.Tree {
	t := flame.New(4)
	for r := range 3 {
		t.Add(r, []flame.Key{flame.StateKey("S (sleeping)")})
		t.Add(r, []flame.Key{{Func: "main", File: "/bin/python3"}, {Func: "_PyEval_EvalFrameDefault", File: "/usr/lib/libpython3.11.so.1.0"},
			{Func: "all_reduce", File: "/site-packages/torch/distributed/distributed_c10d.py", Line: 2050}, {Func: "ncclAllReduce", File: "/usr/lib/libnccl.so.2"}})
		for i, h := range hostile {
			t.Add(r, []flame.Key{{Func: "main", File: "/bin/python3"}, {Func: h, File: hostile[(i+1)%len(hostile)], Line: r + 1}})
		}
	}
	t.Add(3, []flame.Key{flame.StateKey("R (running)")})
	t.Add(3, []flame.Key{{Func: "c10d::ProcessGroupNCCL::watchdog()", File: "/lib/libtorch_cuda.so"}})
	t.Finish(w)
	return t
}

func render(t *testing.T, tr *flame.Tree, o Options) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Render(&b, tr, o); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// structure parses doc strictly and lists its elements, ids and classes,
// with every frame's title; it fails on any markup a name injected.
func structure(t *testing.T, doc []byte) (string, int) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	d.Strict = true
	var out strings.Builder
	var stack []string
	frames := 0
	inTitle := false
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			stack = append(stack, e.Name.Local)
			switch e.Name.Local {
			case "svg", "g", "rect", "text", "title", "script", "style", "defs", "linearGradient", "stop":
			default:
				t.Errorf("unexpected element <%s>", e.Name.Local)
			}
			if e.Name.Local == "script" && len(stack) != 2 {
				t.Errorf("script element inside %v: injected", stack)
			}
			attrs := ""
			for _, a := range e.Attr {
				if a.Name.Local == "id" || a.Name.Local == "class" || a.Name.Local == "data-x" || a.Name.Local == "data-w" {
					attrs += fmt.Sprintf(" %s=%s", a.Name.Local, a.Value)
				}
				if strings.HasPrefix(strings.ToLower(a.Name.Local), "on") {
					t.Errorf("event handler attribute %s: injected", a.Name.Local)
				}
			}
			if e.Name.Local == "g" && strings.Contains(attrs, "class=f") {
				frames++
			}
			if e.Name.Local != "rect" && e.Name.Local != "stop" && e.Name.Local != "text" {
				fmt.Fprintf(&out, "%s<%s%s>\n", strings.Repeat(" ", len(stack)-1), e.Name.Local, attrs)
			}
			inTitle = e.Name.Local == "title"
		case xml.EndElement:
			stack = stack[:len(stack)-1]
			inTitle = false
		case xml.CharData:
			if inTitle {
				fmt.Fprintf(&out, "%s%q\n", strings.Repeat(" ", len(stack)), string(e))
			}
		}
	}
	return out.String(), frames
}

func TestRenderStructure(t *testing.T) {
	for _, w := range []flame.Weight{flame.Stacks, flame.Ranks} {
		tr := tree(w)
		doc := render(t, tr, Options{Title: "Merged <stacks> & \"more\"", Subtitle: "world size 4\x00", Width: 1200})
		s, frames := structure(t, doc)
		golden(t, "structure."+w.String()+".txt", []byte(s))
		if want := tr.Nodes + 1; frames != want {
			t.Errorf("%d frames drawn, want %d (every node and the root)", frames, want)
		}
		for _, h := range hostile {
			if strings.Contains(h, "<") && bytes.Contains(doc, []byte(h)) {
				t.Errorf("raw %q in the document", h)
			}
		}
		if bytes.Contains(doc, []byte("\x00")) || bytes.Contains(doc, []byte("\xff")) {
			t.Error("control character or invalid UTF-8 in the document")
		}
	}
}

func TestRenderGolden(t *testing.T) {
	golden(t, "small.svg", render(t, tree(flame.Stacks), Options{Title: "t", Subtitle: "s"}))
}

func TestMinWidth(t *testing.T) {
	tr := flame.New(10000)
	for r := range 5000 {
		tr.Add(r, []flame.Key{{Func: "wide", File: "x"}})
		tr.Add(5000+r, []flame.Key{{Func: "narrow", File: "x", Line: r + 1}})
	}
	tr.Finish(flame.Ranks)
	_, frames := structure(t, render(t, tr, Options{Width: 200}))
	// 180 px over 10000 ranks: each narrow stack is 0.018 px, below the 0.1 px cut.
	if frames != 2 {
		t.Errorf("%d frames drawn, want the root and the wide one", frames)
	}
}

func TestFit(t *testing.T) {
	for _, tc := range []struct {
		s    string
		w    float64
		want string
	}{
		{"short", 1000, "short"},
		{"abcdefghij", 10, ""},
		{"abcdefghijklmnopqrstuvwxyz", 60, "abcdef.."},
		{"日本語日本語日本語日本語", 60, "日本語日本語.."},
	} {
		if got := Fit(tc.s, tc.w); got != tc.want {
			t.Errorf("Fit(%q, %v) = %q, want %q", tc.s, tc.w, got, tc.want)
		}
	}
	// Labels lose their middle: the function and the rank sets stay.
	const label = "stall_in_python_sleep@/work/wt15/testdata/torchjob/job.py:153@2|0-1/3"
	chars := func(n int) float64 { return 3 + float64(n)*fontSize*fontWidth + 0.01 }
	for _, tc := range []struct {
		s    string
		w    float64
		want string
	}{
		{label, chars(80), label},
		{label, chars(45), "stall_in_python_sleep@…/job.py:153@2|0-1/3"},
		{label, chars(32), "stall_in_python_sleep@…@2|0-1/3"},
		{label, chars(20), "stall_in_py…@2|0-1/3"},
		{label, chars(10), "stall…@2|…"},
		{label, chars(6), "stal.."},
		{"State@S (sleeping)@0-1/3|2", chars(20), "State@…@0-1/3|2"},
		// Shortened sets (rankset.AppendShort) are rank sets too.
		{"spin_kernel@/lib/libk.so@2/6/10+4093|0-1/3-5/7-9+12265", chars(44), "spin_kernel@…@2/6/10+4093|0-1/3-5/7-9+12265"},
		{"spin_kernel@/lib/libk.so@2/6/10+4093|0-1/3-5/7-9+12265", chars(30), "spin_kernel@…@2/6/10+4093|…"},
		{"pthread_cond_wait@@GLIBC_2.3.2@/usr/lib/x86_64-linux-gnu/libc.so.6@0-7|", chars(40), "pthread_cond_wait@@GLIBC_2.3.2@…@0-7|"},
	} {
		if got := Fit(tc.s, tc.w); got != tc.want {
			t.Errorf("Fit(%q, %v) = %q, want %q", tc.s, tc.w, got, tc.want)
		}
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		frame string
		want  Palette
	}{
		{"State@R (running)", Purple},
		{"all_reduce@/site-packages/torch/distributed/distributed_c10d.py:2050", Green},
		{"ncclAllReduce@/usr/lib/libnccl.so.2", Green},
		{"c10d::ProcessGroupNCCL::watchdog()@/site-packages/torch/lib/libtorch_cuda.so", Green},
		{"c10d::ProcessGroupNCCL::watchdog()@/lib/libtorch_cuda.so", Yellow},
		{"std::thread::_State_impl::_M_run()@/lib/libstdc++.so.6", Yellow},
		{"step@train.py:40", Aqua},
		{"_PyEval_EvalFrameDefault@/usr/lib/libpython3.11.so.1.0", Aqua},
		{"PyObject_Call@Objects/call.c:12", Aqua},
		{"pthread_cond_wait@@GLIBC_2.3.2@/lib/libc.so.6", Red},
		{"??@??", Red},
	} {
		if got := Classify(tc.frame); got != tc.want {
			t.Errorf("Classify(%q) = %d, want %d", tc.frame, got, tc.want)
		}
	}
	if first := Color("x@y"); Color("x@y") != first {
		t.Error("colour not deterministic")
	}
}

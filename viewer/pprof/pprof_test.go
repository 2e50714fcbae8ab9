package pprof

import (
	"bytes"
	"slices"
	"testing"

	"github.com/google/pprof/profile"

	"github.com/xpu-timer/xpu-timer/viewer/flame"
)

func TestBuild(t *testing.T) {
	tr := flame.New(4)
	a := []flame.Key{{Func: "main", File: "/bin/x"}, {Func: "wait", File: "x.py", Line: 3}}
	b := []flame.Key{{Func: "main", File: "/bin/x"}, {Func: "pthread_cond_wait@@GLIBC_2.3.2", File: "/lib/libc.so.6"}}
	tr.Add(0, a)
	tr.Add(1, a)
	tr.Add(2, b)
	tr.Finish(flame.Ranks)
	var buf bytes.Buffer
	if err := Write(&buf, tr, "mixed"); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != 2 || p.DefaultSampleType != "ranks" {
		t.Fatalf("%d samples, default %q", len(p.Sample), p.DefaultSampleType)
	}
	got := map[string][]int64{}
	for _, s := range p.Sample {
		leaf := s.Location[0].Line[0]
		root := s.Location[len(s.Location)-1].Line[0].Function.Name
		if root != "main" {
			t.Errorf("root frame %q, want main (leaf first order)", root)
		}
		got[leaf.Function.Name+"|"+s.Label["ranks"][0]+"|"+s.Label["leak"][0]] = s.Value
		if leaf.Function.Name == "wait" && (leaf.Line != 3 || leaf.Function.Filename != "x.py") {
			t.Errorf("python frame %+v", leaf)
		}
	}
	if !slices.Equal(got["wait|0-1|2-3"], []int64{1, 2}) || !slices.Equal(got["pthread_cond_wait@@GLIBC_2.3.2|2|0-1/3"], []int64{1, 1}) {
		t.Errorf("samples %v", got)
	}
}

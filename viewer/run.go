package viewer

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/xpu-timer/xpu-timer/viewer/flame"
	"github.com/xpu-timer/xpu-timer/viewer/pprof"
	"github.com/xpu-timer/xpu-timer/viewer/svg"
)

// Output file names, as xpu_timer names them (mixed_stack, stacks.pb.gz and
// summary.txt are ours).
const (
	CppFolded   = "cpp_stack"
	PyFolded    = "py_stack"
	MixedFolded = "mixed_stack"
	CppSVG      = "cpp_stack.svg"
	PySVG       = "py_stack.svg"
	MixedSVG    = "mixed_stack.svg"
	Profile     = "stacks.pb.gz"
	Summary     = "summary.txt"
)

// Run merges the dumps in o.Dir and writes every output into o.Out.
func Run(o Options) (*Result, error) {
	if o.Out == "" {
		o.Out = o.Dir
	}
	views, res, err := Merge(o)
	if err != nil {
		return res, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return res, fmt.Errorf("create %s: %w", o.Out, err)
	}
	res.Summary = summary(res)
	sub := subtitle(res, o.Weight)
	type job struct {
		name  string
		write func(io.Writer) error
	}
	picture := func(t *flame.Tree, title string) func(io.Writer) error {
		return func(w io.Writer) error {
			return svg.Render(w, t, svg.Options{Title: title, Subtitle: sub, Width: o.Width})
		}
	}
	jobs := []job{
		{CppFolded, views.Cpp.WriteFolded},
		{PyFolded, views.Py.WriteFolded},
		{MixedFolded, views.Mixed.WriteFolded},
		{CppSVG, picture(views.Cpp, "Merged native (C/C++) stacks")},
		{PySVG, picture(views.Py, "Merged Python stacks")},
		{MixedSVG, picture(views.Mixed, "Merged native and Python stacks")},
		{Profile, func(w io.Writer) error { return pprof.Write(w, views.Mixed, "mixed") }},
		{Summary, func(w io.Writer) error { _, err := io.WriteString(w, res.Summary); return err }},
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() { errs[i] = writeFile(filepath.Join(o.Out, j.name), j.write) })
	}
	wg.Wait()
	for i, j := range jobs {
		if errs[i] != nil {
			return res, errs[i]
		}
		res.Outputs = append(res.Outputs, filepath.Join(o.Out, j.name))
	}
	return res, nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	if err := write(bw); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

func summary(res *Result) string {
	var b strings.Builder
	b.WriteString(res.Report.Text())
	if len(res.Skipped) > 0 {
		b.WriteString("\nSkipped files:\n")
		for _, s := range res.Skipped {
			fmt.Fprintf(&b, "  %v\n", s.Err)
		}
	}
	return b.String()
}

func sortSkipped(s []Skipped) {
	slices.SortFunc(s, func(a, b Skipped) int { return cmp.Compare(a.Path, b.Path) })
}

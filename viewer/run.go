package viewer

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/atomicfile"
	"github.com/xpu-timer/xpu-timer/timeline"
	"github.com/xpu-timer/xpu-timer/viewer/flame"
	"github.com/xpu-timer/xpu-timer/viewer/pprof"
	"github.com/xpu-timer/xpu-timer/viewer/svg"
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
		{timeline.CppFolded, views.Cpp.WriteFolded},
		{timeline.PyFolded, views.Py.WriteFolded},
		{timeline.MixedFolded, views.Mixed.WriteFolded},
		{timeline.CppSVG, picture(views.Cpp, "Merged native (C/C++) stacks")},
		{timeline.PySVG, picture(views.Py, "Merged Python stacks")},
		{timeline.MixedSVG, picture(views.Mixed, "Merged native and Python stacks")},
		{timeline.Profile, func(w io.Writer) error { return pprof.Write(w, views.Mixed, "mixed") }},
		{timeline.Summary, func(w io.Writer) error { _, err := io.WriteString(w, res.Summary); return err }},
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

// writeFile writes one output atomically: the output directory may be
// the shared dump directory, where a symbolic link planted under an
// output's name must be replaced, never followed.
func writeFile(path string, write func(io.Writer) error) error {
	return atomicfile.WriteFunc(path, write)
}

func summary(res *Result) string {
	var b strings.Builder
	if len(res.Groups) > 0 {
		b.WriteString("Dumps of several runs (job, incarnation, world size); merged the one marked *, --incarnation picks another:\n")
		for _, g := range res.Groups {
			mark := " "
			if g.Merged {
				mark = "*"
			}
			fmt.Fprintf(&b, " %s %s: %d %s (%s), newest %s\n", mark, g, len(g.Files), plural(len(g.Files), "file"),
				strings.Join(g.Files, ", "), g.Newest.UTC().Format(time.RFC3339))
		}
		b.WriteString("\n")
	}
	if len(res.Conflicts) > 0 {
		b.WriteString("Conflicts:\n")
		for _, c := range res.Conflicts {
			fmt.Fprintf(&b, "  %s\n", c)
		}
		b.WriteString("\n")
	}
	b.WriteString(res.Report.Text())
	if len(res.Skipped) > 0 {
		b.WriteString("\nSkipped files:\n")
		for _, s := range res.Skipped {
			fmt.Fprintf(&b, "  %v\n", s.Err)
		}
	}
	return b.String()
}

func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

func sortSkipped(s []Skipped) {
	slices.SortFunc(s, func(a, b Skipped) int { return cmp.Compare(a.Path, b.Path) })
}

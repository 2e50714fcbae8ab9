package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Every family the exporter serves (beyond the Go runtime's and the
// process's) is named in docs/usage.md's metrics table.
func TestUsageDocumentsMetrics(t *testing.T) {
	data, err := os.ReadFile("../docs/usage.md")
	if err != nil {
		t.Fatal(err)
	}
	usage := string(data)
	for name := range servedFamilies(t) {
		if name == "up" || strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") || strings.HasPrefix(name, "promhttp_") {
			continue
		}
		if base, ok := histogramBase(name); ok && strings.Contains(usage, "`"+base+"`") {
			continue
		}
		if !strings.Contains(usage, "`"+name+"`") {
			t.Errorf("docs/usage.md does not name the family %s", name)
		}
	}
}

// histogramBase strips a histogram series suffix.
func histogramBase(name string) (string, bool) {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, s); ok {
			return b, true
		}
	}
	return "", false
}

var (
	mdLink    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	mdHeading = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *$`)
	mdFence   = regexp.MustCompile("(?ms)^```.*?^```")
)

// Every relative link of the README and docs/ reaches a file, and every
// #anchor a heading of it (GitHub's slugs).
func TestDocLinks(t *testing.T) {
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../README.md", "README.md")
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		a := map[string]bool{}
		for _, m := range mdHeading.FindAllStringSubmatch(mdFence.ReplaceAllString(string(data), ""), -1) {
			a[slug(m[1])] = true
		}
		anchors[path] = a
		return a
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(link, "#")
			target := f
			if path != "" {
				target = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(target); err != nil {
					t.Errorf("%s: link %s: %v", f, link, err)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(target, ".md") && !anchorsOf(target)[anchor] {
				t.Errorf("%s: link %s: no heading with that anchor in %s", f, link, target)
			}
		}
	}
}

// slug is GitHub's anchor of a heading: lower case, punctuation dropped
// (hyphens and underscores kept), spaces as hyphens.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

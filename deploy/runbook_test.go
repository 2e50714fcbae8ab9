package deploy

import (
	"os"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// runbookBase is where the alerts' runbook_url point (the chart's default
// alerts.runbookBaseURL).
const runbookBase = "https://github.com/xpu-timer/xpu-timer/blob/main/docs/runbook.md"

// Every alert links its own section of docs/runbook.md, and the runbook
// has a section for every alert and none for an alert that does not exist.
func TestRunbook(t *testing.T) {
	data, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Groups []struct {
			Rules []struct {
				Alert       string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	book, err := os.ReadFile("../docs/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]bool{}
	for _, l := range strings.Split(string(book), "\n") {
		if s, ok := strings.CutPrefix(l, "## "); ok {
			sections[s] = true
		}
	}
	n := 0
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue // a recording rule
			}
			n++
			anchor := strings.ToLower(r.Alert)
			if got, want := r.Annotations["runbook_url"], runbookBase+"#"+anchor; got != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, got, want)
			}
			if !sections[anchor] {
				t.Errorf("%s: docs/runbook.md has no section %q", r.Alert, "## "+anchor)
			}
			if !strings.Contains(string(book), "**"+r.Alert+"**") {
				t.Errorf("%s: docs/runbook.md does not name the alert", r.Alert)
			}
			delete(sections, anchor)
		}
	}
	if n == 0 {
		t.Fatal("no alerts read")
	}
	if len(sections) != 0 {
		t.Errorf("runbook sections for no alert: %v", sections)
	}
}

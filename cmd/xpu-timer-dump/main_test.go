package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/version"
)

// The binary links the stack capture alone (dumpcmd.Standalone): none of
// the agent's probes, metrics, GPU libraries or configuration.
func TestLinksNoAgent(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list named %d packages", len(deps))
	}
	for _, d := range deps {
		for _, heavy := range []string{"github.com/cilium/ebpf", "github.com/prometheus/", "github.com/NVIDIA/go-nvml",
			"github.com/xpu-timer/xpu-timer/ebpf", "github.com/xpu-timer/xpu-timer/collector/metrics", "github.com/xpu-timer/xpu-timer/cmd/internal/config"} {
			if strings.HasPrefix(d, heavy) {
				t.Errorf("xpu-timer-dump links %s", d)
			}
		}
		if d == "github.com/xpu-timer/xpu-timer/agent" {
			t.Errorf("xpu-timer-dump links %s", d)
		}
		// Their package initialisation costs every start time
		// (GODEBUG=inittrace=1 shows it; docs/measurements.md), and the
		// stop helper's protocol and the unwinder do without them.
		if d == "encoding/gob" || d == "github.com/go-delve/delve/pkg/dwarf/regnum" {
			t.Errorf("xpu-timer-dump links %s", d)
		}
	}
}

// Built as make builds it, the binary and the viewer link no cgo, so they
// are static (version.BuildTags says why that matters).
func TestNoCgo(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-tags", version.BuildTags,
		"-f", "{{if .CgoFiles}}{{.ImportPath}}{{end}}", ".", "../xpu_timer_stacktrace_viewer").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	if cgo := strings.Fields(string(out)); len(cgo) > 0 {
		t.Errorf("with tags %s, xpu-timer-dump or the viewer links packages that use cgo: %v", version.BuildTags, cgo)
	}
}

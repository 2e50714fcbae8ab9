package main

import (
	"os/exec"
	"strings"
	"testing"
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
	}
}

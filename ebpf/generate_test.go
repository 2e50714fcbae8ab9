package ebpf

import (
	"os/exec"
	"testing"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
)

// The committed probes_x86_bpfel.{go,o} are what probes.bpf.c produces
// with the pinned clang.
func TestGeneratedUpToDate(t *testing.T) {
	if _, err := exec.LookPath("clang-16"); err != nil {
		if privileged.Required() {
			t.Fatal("clang-16 is missing: scripts/deps.sh installs it")
		}
		t.Skip("clang-16 is missing: scripts/deps.sh installs it")
	}
	out, err := exec.Command("../scripts/generate.sh", "--check").CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/generate.sh --check: %v\n%s", err, out)
	}
}

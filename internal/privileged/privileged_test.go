package privileged

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSkipFailsWhenRequired runs Skip in a child test process and checks that
// it fails under XPU_TIMER_REQUIRE_PRIVILEGED=1 and skips otherwise.
func TestSkipFailsWhenRequired(t *testing.T) {
	if os.Getenv("PRIVILEGED_CHILD") == "1" {
		Skip(t, "child")
		return
	}
	for _, tc := range []struct {
		require string
		wantErr bool
		want    string
	}{
		{"1", true, "FAIL"},
		{"", false, "SKIP"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSkipFailsWhenRequired$", "-test.v")
		cmd.Env = append(os.Environ(), "PRIVILEGED_CHILD=1", "XPU_TIMER_REQUIRE_PRIVILEGED="+tc.require)
		out, err := cmd.CombinedOutput()
		if (err != nil) != tc.wantErr || !strings.Contains(string(out), tc.want) {
			t.Errorf("require=%q: err=%v, output:\n%s", tc.require, err, out)
		}
	}
}

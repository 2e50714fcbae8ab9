//go:build linux && (386 || amd64)

package ebpf

import (
	"strings"

	"github.com/xpu-timer/xpu-timer/internal/caps"
)

// missingCaps says which capabilities the process lacks for BPF tracing.
func missingCaps() string {
	have, err := caps.Self()
	if err != nil {
		return "run as root, or with CAP_BPF and CAP_PERFMON"
	}
	if have.Has(caps.SysAdmin) {
		return "CAP_SYS_ADMIN is held, but the kernel refused: check kernel.unprivileged_bpf_disabled and lockdown"
	}
	var miss []string
	for _, c := range []struct {
		n    int
		name string
	}{{caps.BPF, "CAP_BPF"}, {caps.Perfmon, "CAP_PERFMON"}} {
		if !have.Has(c.n) {
			miss = append(miss, c.name)
		}
	}
	if len(miss) == 0 {
		return "run as root: this kernel may predate CAP_BPF (5.8) and need CAP_SYS_ADMIN"
	}
	return "missing " + strings.Join(miss, " and ") + "; run as root or grant them"
}

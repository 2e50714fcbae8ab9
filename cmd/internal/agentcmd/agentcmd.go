// Package agentcmd is `xpu-timer agent`: the node agent for clusters where
// the launch command cannot change (a Kubernetes DaemonSet). It finds every
// training process on the node and runs the same detection, dumps and
// metrics as xpu_timer_launch.
package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/xpu-timer/xpu-timer/agent"
	"github.com/xpu-timer/xpu-timer/cmd/internal/config"
	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/ranks"
)

// New returns the agent command.
func New() *cobra.Command {
	var scan time.Duration
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Watch every training process on this node for hangs (DaemonSet mode)",
		Long: `agent rescans /proc every --scan-interval for training processes (RANK in
the environment and a CUDA, NCCL, MACA or MCCL library, or one named by
--libraries, mapped), follows them and their descendants, and runs the same
hang detection, dumps, markers and metrics as xpu_timer_launch until SIGINT,
SIGTERM or SIGHUP (a closed terminal), which end it with status 0, what it
held resumed and its probes detached. It needs CAP_BPF, CAP_PERFMON and
CAP_SYS_PTRACE (or root) and the host's PID namespace.

--namespaces, --pod-regex, --pod-uids and --command-regex narrow which
processes it follows: a process left out gets no probes, no dumps and no
metrics, and the log says once why. The namespace and pod name come from the
process's environment (POD_NAMESPACE, POD_NAME, set from the downward API),
the pod UID from its cgroup.`,
		Args: cobra.NoArgs,
	}
	b := config.BindAgent(cmd.Flags())
	cmd.Flags().DurationVar(&scan, "scan-interval", 2*time.Second, "how often /proc is scanned for new training processes")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := b.Load()
		if err != nil {
			return exitcode.With(exitcode.Usage, fmt.Errorf("configuration: %w", err))
		}
		log, closer, err := cfg.NewLogger("xpu_timer_agent")
		if err != nil {
			return err
		}
		defer closer.Close()
		log = log.With("component", "agent")
		mon, err := agent.OpenMonitor(agent.Options{Settings: cfg.Settings, Logger: log})
		if err != nil {
			if errors.Is(err, agent.ErrNotPermitted) {
				return exitcode.With(exitcode.NotPermitted, fmt.Errorf("the agent needs eBPF: run as root or grant CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE: %w", err))
			}
			return err
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		defer stop()
		mon.Start(ctx)
		Follow(ctx, mon.Agent, Finder{Libraries: cfg.Libraries, Scope: cfg.Scope}, scan, log)
		return mon.Close()
	}
	return cmd
}

// Finder says which processes on the node are training processes to
// follow.
type Finder struct {
	Libraries []string     // extra vendor libraries (--libraries)
	Scope     *ranks.Scope // nil: every training process
}

// Follow scans for training processes every interval and follows each new
// one until ctx is done. A process the scope leaves out is logged once.
func Follow(ctx context.Context, a *agent.Agent, f Finder, interval time.Duration, log *slog.Logger) {
	followed := map[int]bool{}
	skipped := map[int]bool{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		found, out := f.Scan()
		live := make(map[int]bool, len(found)+len(out))
		for pid, why := range out {
			live[pid] = true
			if !skipped[pid] {
				skipped[pid] = true
				log.Info("not following training process: out of scope", "pid", pid, "why", why)
			}
		}
		for _, pid := range found {
			live[pid] = true
			if followed[pid] {
				continue
			}
			if err := a.Follow(pid); err != nil {
				log.Warn("follow training process", "pid", pid, "err", err)
				continue
			}
			followed[pid] = true
			log.Info("following training process", "pid", pid)
		}
		for _, m := range []map[int]bool{followed, skipped} {
			for pid := range m {
				if !live[pid] {
					delete(m, pid)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Scan lists the training processes on the node (RANK in the environment
// and a vendor library, or one of f.Libraries, mapped) that f.Scope
// admits, and those it leaves out with the reason.
func (f Finder) Scan() (found []int, out map[int]string) {
	pids, err := procfs.PIDs()
	if err != nil {
		return nil, nil
	}
	self := os.Getpid()
	for _, pid := range pids {
		if pid == self {
			continue
		}
		env, err := procfs.Environ(pid)
		if err != nil || !HasRank(env) {
			continue
		}
		maps, err := procfs.Maps(pid)
		if err != nil || !MapsVendor(maps, f.Libraries) {
			continue
		}
		if !f.Scope.Empty() {
			p := agent.Inspect(pid)
			p.Env = env
			if ok, why := f.Scope.Admit(p); !ok {
				if out == nil {
					out = map[int]string{}
				}
				out[pid] = why
				continue
			}
		}
		found = append(found, pid)
	}
	return found, out
}

// HasRank says whether an environment names a rank.
func HasRank(env map[string]string) bool {
	_, ok := env["RANK"]
	return ok
}

// vendorPrefixes are file name prefixes of the libraries we probe.
var vendorPrefixes = []string{"libcudart.so", "libcuda.so", "libnccl.so", "libmcruntime.so", "libmccl.so", "libmcruntime", "libmccl"}

// MapsVendor says whether a process maps a CUDA, NCCL, MACA or MCCL
// library, or one of libs (by path or file name).
func MapsVendor(maps []procfs.Mapping, libs []string) bool {
	for _, m := range maps {
		if m.Path == "" || m.Path[0] != '/' {
			continue
		}
		base := filepath.Base(m.Path)
		for _, p := range vendorPrefixes {
			if strings.HasPrefix(base, p) {
				return true
			}
		}
		for _, l := range libs {
			if m.Path == l || base == filepath.Base(l) {
				return true
			}
		}
	}
	return false
}

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
	"github.com/xpu-timer/xpu-timer/internal/procfs"
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
hang detection, dumps, markers and metrics as xpu_timer_launch until SIGINT or
SIGTERM. It needs CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE (or root) and the
host's PID namespace.`,
		Args: cobra.NoArgs,
	}
	b := config.Bind(cmd.Flags())
	cmd.Flags().DurationVar(&scan, "scan-interval", 2*time.Second, "how often /proc is scanned for new training processes")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := b.Load()
		if err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
		log, closer, err := config.Logger(cfg.LoggingDir, "xpu_timer_agent", slog.LevelInfo)
		if err != nil {
			return err
		}
		defer closer.Close()
		log = log.With("component", "agent")
		mo := cfg.Monitor()
		mo.Logger = log
		mon, err := agent.OpenMonitor(mo)
		if err != nil {
			if errors.Is(err, agent.ErrNotPermitted) {
				return fmt.Errorf("the agent needs eBPF: run as root or grant CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE: %w", err)
			}
			return err
		}
		ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
		defer stop()
		mon.Start(ctx)
		Follow(ctx, mon.Agent, cfg.Libraries, scan, log)
		return mon.Close()
	}
	return cmd
}

// Follow scans for training processes every interval and follows each new
// one until ctx is done.
func Follow(ctx context.Context, a *agent.Agent, libs []string, interval time.Duration, log *slog.Logger) {
	followed := map[int]bool{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		found := Scan(libs)
		live := make(map[int]bool, len(found))
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
		for pid := range followed {
			if !live[pid] {
				delete(followed, pid)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Scan lists the training processes on the node: RANK in the environment
// and a vendor library (or one of libs) mapped.
func Scan(libs []string) []int {
	pids, err := procfs.PIDs()
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, pid := range pids {
		if pid == self {
			continue
		}
		env, err := procfs.Environ(pid)
		if err != nil || !HasRank(env) {
			continue
		}
		maps, err := procfs.Maps(pid)
		if err != nil {
			continue
		}
		if MapsVendor(maps, libs) {
			out = append(out, pid)
		}
	}
	return out
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

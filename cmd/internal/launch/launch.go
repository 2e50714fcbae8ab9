// Package launch is the xpu_timer_launch command: it runs a training
// command unchanged and watches every process it starts for hangs.
package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/xpu-timer/xpu-timer/agent"
	"github.com/xpu-timer/xpu-timer/cmd/internal/config"
	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
	"github.com/xpu-timer/xpu-timer/cmd/internal/process"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// Notice is printed once, to stderr, when the job runs unmonitored because
// eBPF is not permitted.
const Notice = "xpu_timer_launch: hang detection is OFF for this job: loading eBPF programs is not permitted for this user. " +
	"It needs CAP_BPF and CAP_PERFMON for the probes and CAP_SYS_PTRACE for stack dumps: run as root, or grant them " +
	"(e.g. docker run --cap-add BPF --cap-add PERFMON --cap-add SYS_PTRACE, or Kubernetes securityContext.capabilities.add). " +
	"The job runs unmonitored.\n"

// New returns the xpu_timer_launch command.
func New() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "xpu_timer_launch [flags] CMD [ARGS...]",
		Short: "Run a training command and detect, dump and report its hangs",
		Long: `xpu_timer_launch runs CMD with its standard streams untouched, forwards
SIGINT, SIGTERM and SIGHUP to it and exits with its status (128+N when signal
N killed it). It follows every process CMD starts, decides from eBPF probes on
CUDA/NCCL (and MACA/MCCL) calls when a rank hangs, dumps every rank on the node
into the timeline path and serves Prometheus metrics. Flags end at CMD, so
CMD's own flags pass through. Every flag also reads its XPU_TIMER_* variable.
A bad flag value is a usage error (exit status 2, CMD is not started); a bad
XPU_TIMER_* value from the environment or the settings file is told once on
stderr and its default taken, and CMD runs.`,
		SilenceUsage:  true,
		SilenceErrors: true, // the job's exit status is not an error to print
	}
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return exitcode.Usagef("no command given")
		}
		return nil
	}
	cmd.Flags().SetInterspersed(false)
	b := config.Bind(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		fail := func(code int, err error) error {
			fmt.Fprintln(cmd.ErrOrStderr(), "xpu_timer_launch:", err)
			return exitcode.Status(code)
		}
		// A bad value on the command line was refused (exit 2) when the
		// flags were parsed: the user typed it. One from the environment
		// or the config file, which the job's platform may set for every
		// job, never stops the job: it is told once and its default taken.
		cfg, bad := b.LoadLenient()
		for _, inv := range bad {
			fmt.Fprintln(cmd.ErrOrStderr(), SettingNotice(inv))
		}
		log, closer, err := cfg.NewLogger("xpu_timer_launch")
		if err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "xpu_timer_launch: ignoring XPU_TIMER_LOGGING_DIR %q: %v; logging to stderr instead\n", cfg.LoggingDir, err)
			cfg.LoggingDir = ""
			log, closer, _ = cfg.NewLogger("xpu_timer_launch")
		}
		defer closer.Close()
		log = log.With("component", "xpu_timer_launch")
		code, err := Run(cmd.Context(), cfg, args, Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr}, log)
		if err != nil {
			return fail(code, err)
		}
		if code != 0 {
			return exitcode.Status(code)
		}
		return nil
	}
	return cmd
}

// SettingNotice is the line printed for a setting refused and replaced by
// its default.
func SettingNotice(inv *config.Invalid) string {
	def := inv.Default
	if def == "" {
		def = "unset"
	}
	return fmt.Sprintf("xpu_timer_launch: ignoring %v; using the default (%s) instead", inv, def)
}

// Streams are the child's standard streams; Err also takes the notice.
type Streams struct {
	In       io.Reader
	Out, Err io.Writer
}

// Run runs args under monitoring and returns its exit status. Monitoring
// problems never stop the job: they are logged, or, when eBPF is not
// permitted, told once on st.Err.
func Run(ctx context.Context, cfg config.Config, args []string, st Streams, log *slog.Logger) (int, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	var root int
	// The job runs in the launcher's process group: end the job's tree.
	kill := func(int) error { return procfs.KillTree(root) }
	mon, err := agent.OpenMonitor(agent.Options{Settings: cfg.Settings, Logger: log, Kill: kill})
	if err != nil {
		if errors.Is(err, agent.ErrNotPermitted) {
			fmt.Fprint(st.Err, Notice)
			log.Debug("eBPF not permitted", "err", err)
		} else {
			fmt.Fprintf(st.Err, "xpu_timer_launch: hang detection is OFF for this job: %v. The job runs unmonitored.\n", err)
		}
		mon = nil
	}
	// The job is followed while held at its exec, before ld.so maps its
	// libraries, by a monitor that already reads (so that each load is
	// held until probed): a C++ program linked to the driver, or one that
	// loads it first thing, is probed from its first call.
	var follow func(pid int)
	if mon != nil {
		mon.Start(ctx)
		follow = func(pid int) {
			if err := mon.Agent.Follow(pid); err != nil {
				log.Warn("cannot follow the job; it runs unmonitored", "err", err)
			}
		}
	}
	child, err := process.Start(args, st.In, st.Out, st.Err, follow)
	if err != nil {
		if mon != nil {
			mon.Close()
		}
		return process.StartStatus(err), err
	}
	root = child.PID()
	code, werr := child.Wait()
	if mon != nil {
		if err := mon.Close(); err != nil {
			log.Debug("close monitor", "err", err)
		}
	}
	return code, werr
}

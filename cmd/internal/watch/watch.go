// Package watch is `xpu-timer watch`: attach to processes (or start a
// command), decide hangs and print one JSON line per notable event.
package watch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/xpu-timer/xpu-timer/agent"
	"github.com/xpu-timer/xpu-timer/cmd/internal/config"
	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
	"github.com/xpu-timer/xpu-timer/cmd/internal/process"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// seconds is a duration flag that also takes plain seconds ("5", "0.5").
type seconds struct{ d *time.Duration }

func (s seconds) String() string {
	if s.d == nil || *s.d == 0 {
		return ""
	}
	return s.d.String()
}
func (s seconds) Type() string { return "duration" }
func (s seconds) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
		*s.d = time.Duration(f * float64(time.Second))
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("%q: want seconds or a positive duration", v)
	}
	*s.d = d
	return nil
}

// New returns the watch command.
func New() *cobra.Command {
	var (
		timeout    time.Duration
		exitOnHang bool
		pids       []int
		libs       []string
		interval   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "watch [--timeout DURATION] [--exit-on-hang] (--pid PID ... | -- CMD ARGS...)",
		Short: "Attach to processes or a command and print hang decisions as JSON lines",
		Long: `watch follows the given processes and their descendants (or a command it
starts), decides from eBPF probes when a rank hangs, and prints one JSON line
per notable event on stdout: {"event":"rank"|"attach"|"missing"|"exec"|"exit"|
"hang"|"recovered"|"lost"|"error",...}. A hang line carries the decision:
rank, pid, kind (gpu or host), op, seq, comm, age_s, waiters and comms.
A started command's stdout goes to stderr so stdout stays JSON. watch ends
when the command or every watched process ends (with the command's status),
or, with --exit-on-hang, after the first hang (status 3): a command it started
is then sent SIGTERM and, if still running after a grace period, killed with
its descendants; processes given with --pid are left alone. Without a command,
SIGINT, SIGTERM or SIGHUP ends it with status 0, its processes left running
(a command gets those signals instead).`,
		SilenceUsage: true,
	}
	cmd.Flags().Var(seconds{&timeout}, "timeout", "hang timeout (seconds or a duration; default $XPU_TIMER_HANG_TIMEOUT, else 300s)")
	cmd.Flags().BoolVar(&exitOnHang, "exit-on-hang", false, "exit after the first hang (status 3)")
	cmd.Flags().IntSliceVar(&pids, "pid", nil, "process to watch with its descendants (repeatable)")
	cmd.Flags().StringSliceVar(&libs, "libraries", nil, "extra vendor library paths to probe [$XPU_TIMER_LIBRARIES]")
	cmd.Flags().DurationVar(&interval, "interval", agent.DefaultInterval, "how often hangs are checked")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if (len(pids) == 0) == (len(args) == 0) {
			return exitcode.Usagef("give either --pid PID... or -- CMD ARGS...")
		}
		// XPU_TIMER_HANG_TIMEOUT and friends from the environment and the
		// config file; the flags here win.
		cfg, err := config.Bind(pflag.NewFlagSet("env", pflag.ContinueOnError)).Load()
		if err != nil {
			return exitcode.With(exitcode.Usage, fmt.Errorf("configuration: %w", err))
		}
		if timeout > 0 {
			cfg.HangTimeout = timeout
		}
		if len(libs) > 0 {
			cfg.Libraries = libs
		}
		return run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), cfg, interval, exitOnHang, pids, args)
	}
	return cmd
}

// testTracer, set by tests, replaces the eBPF tracer.
var testTracer agent.Tracer

func run(ctx context.Context, out, errw io.Writer, cfg config.Config, interval time.Duration, exitOnHang bool, pids []int, args []string) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if len(args) == 0 {
		// With no command to pass them to, an interrupt, a termination
		// or a hangup ends the watch as its processes' exits do: the
		// tracer closes, and a process it holds at an exec or a load
		// goes on (killed there, it stayed stopped).
		var stop context.CancelFunc
		ctx, stop = signal.NotifyContext(ctx, process.Forwarded...)
		defer stop()
	}
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	hung := make(chan struct{}, 1)
	emit := func(r agent.Report) {
		mu.Lock()
		_ = enc.Encode(r)
		mu.Unlock()
		if r.Event == agent.EventHang {
			select {
			case hung <- struct{}{}:
			default:
			}
		}
	}
	// Errors only on stderr, where a started command's output goes too,
	// unless XPU_TIMER_LOG_LEVEL asks for more.
	level := slog.LevelError
	if _, set := os.LookupEnv("XPU_TIMER_LOG_LEVEL"); set {
		level = cfg.LogLevel
	}
	log := slog.New(slog.NewTextHandler(errw, &slog.HandlerOptions{Level: level}))
	// The monitor the launcher and the agent open, with their settings
	// and ptrace check, that only decides and reports: watch dumps
	// nothing and leaves the timeline path alone.
	mon, err := agent.OpenMonitor(agent.Options{Settings: cfg.Settings, Tracer: testTracer, Interval: interval, OnReport: emit, Logger: log, DetectOnly: true})
	if err != nil {
		if errors.Is(err, agent.ErrNotPermitted) {
			return exitcode.With(exitcode.NotPermitted, fmt.Errorf("watch needs eBPF: run as root, or grant CAP_BPF and CAP_PERFMON: %w", err))
		}
		return err
	}
	defer mon.Close()
	a := mon.Agent
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The loop reads before a command starts, so that its loads are held
	// until probed (agent.WaitTracing).
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	a.WaitTracing(time.Second)

	var child *process.Child
	childDone := make(chan int, 1)
	if len(args) > 0 {
		// The command's stdout goes to stderr: stdout carries JSON only.
		// It is followed while held at its exec: nothing it loads is
		// missed.
		var followErr error
		if child, err = process.Start(args, os.Stdin, errw, errw, func(pid int) { followErr = a.Follow(pid) }); err != nil {
			return err
		}
		if followErr != nil {
			return followErr
		}
		pids = []int{child.PID()}
		go func() {
			code, _ := child.Wait()
			childDone <- code
		}()
	}
	for _, pid := range pids {
		if child != nil {
			break // followed at its start
		}
		if _, err := procfs.ReadStat(pid); err != nil {
			return exitcode.With(exitcode.NoProcess, fmt.Errorf("watch %d: %w", pid, err))
		}
		if err := a.Follow(pid); err != nil {
			return err
		}
	}
	poll := time.NewTicker(250 * time.Millisecond)
	defer poll.Stop()
	code := 0
	// The exit line is printed once the loop has stopped, so that it is
	// the last line: reports of the exits it ends with may still be on
	// their way when the command's status is known.
	var last *agent.Report
loop:
	for {
		select {
		case <-hung:
			if exitOnHang {
				code = exitcode.Hang
				break loop
			}
		case code = <-childDone:
			c := code
			last = &agent.Report{Event: agent.EventExit, Time: time.Now(), PID: pids[0], ExitCode: &c}
			break loop
		case <-poll.C:
			if child != nil {
				continue
			}
			live := 0
			for _, pid := range pids {
				if st, err := procfs.ReadStat(pid); err == nil && st.State != 'Z' {
					live++
				}
			}
			if live == 0 {
				last = &agent.Report{Event: agent.EventExit, Time: time.Now()}
				break loop
			}
		case err := <-done:
			done <- err // read again below
			break loop
		case <-ctx.Done():
			break loop
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	if last != nil {
		emit(*last)
	}
	if child != nil && code == exitcode.Hang {
		endCommand(child, childDone, errw)
	}
	if code != 0 {
		return exitcode.Status(code)
	}
	return nil
}

// endGrace is how long a started command may take to end after SIGTERM.
var endGrace = 5 * time.Second

// endCommand ends a command watch started and is leaving (--exit-on-hang):
// SIGTERM, then, after endGrace, SIGKILL to it and its descendants.
func endCommand(child *process.Child, done <-chan int, errw io.Writer) {
	_ = child.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return
	case <-time.After(endGrace):
	}
	fmt.Fprintf(errw, "xpu-timer watch: command %d still running %v after SIGTERM; killing it\n", child.PID(), endGrace)
	_ = procfs.KillTree(child.PID())
	<-done
}

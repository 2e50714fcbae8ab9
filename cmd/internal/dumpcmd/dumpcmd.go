// Package dumpcmd is `xpu-timer dump`: print every thread's native and
// Python stacks of a live process, as text or as the agent's dump file
// (reason "manual"), and write that file where the viewer merges it.
package dumpcmd

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
	"github.com/xpu-timer/xpu-timer/collector/capture/dump"
	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/hugeheap"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/ranks/identity"
	"github.com/xpu-timer/xpu-timer/timeline"
)

// dumpHeap is about twice the Go heap of a first dump of a torch rank
// (7 MB at its peak; libraries' large tables lie outside it).
const dumpHeap = 16 << 20

// oneShotLimit bounds the Go memory of a dump while the collector is off
// (oneShot): it collects only as the heap nears it.
const oneShotLimit = 256 << 20

// oneShot sets the process up for a command that lives for one dump, and
// returns what puts it back. A first dump of a torch rank allocates about
// 10 MB and keeps most of it to the end: collections (three, one forced
// by the huge page reservation) took a tenth of its time and freed
// little. The collector is off, bounded by oneShotLimit, unless GOGC or
// GOMEMLIMIT say otherwise; the heap is fresh memory, faulted in a huge
// page at a time (hugeheap) rather than 2,500 small ones. The reservation
// collects once, which held up the dump's start: it is made on another
// goroutine while the dump reads the process's maps and stops its
// threads, before the symbol tables are read.
func oneShot() (restore func()) {
	gc, limit := debug.SetGCPercent(-1), debug.SetMemoryLimit(-1)
	if os.Getenv("GOGC") != "" {
		debug.SetGCPercent(gc)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(oneShotLimit)
	}
	go hugeheap.Reserve(dumpHeap)
	return func() {
		debug.SetGCPercent(gc)
		debug.SetMemoryLimit(limit)
	}
}

// New returns the dump command.
func New() *cobra.Command {
	var (
		pid                    int
		nativeOnly, pythonOnly bool
		lines                  bool
		asJSON                 bool
		outDir                 string
	)
	cmd := &cobra.Command{
		Use:   "dump --pid PID",
		Short: "Print the native and Python stacks of every thread of a process",
		Long: `Print the native and Python stacks of every thread of a process.

Native frames are named from the libraries' symbol tables (.symtab, in a
separate debug file too, and .dynsym), as eu-stack names them; Python frames
have their file and line. --lines adds what only the debug information
(.debug_info, .debug_line) holds, as gdb shows it: the source line of each
native frame, the functions inlined into it, and the functions left by tail
calls; it costs a first dump the reading (often the inflating) of that
information, libc's separate debug file among it. The --out and --json files
follow the same choice; the agent's and the launcher's dumps always have
lines.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pid <= 0 {
				return exitcode.Usagef("--pid is required")
			}
			o := dump.Options{Lines: lines}
			if nativeOnly && !pythonOnly {
				o.NoPython = true
			}
			if pythonOnly && !nativeOnly {
				o.NoNative = true
			}
			defer oneShot()()
			p, err := dump.Capture(pid, o)
			if err != nil {
				return exitError(pid, err)
			}
			if !asJSON && outDir == "" {
				Text(cmd.OutOrStdout(), p, o)
				return nil
			}
			f := File(p)
			if outDir != "" {
				path, aside, err := timeline.WriteDump(outDir, f)
				switch {
				case aside == nil:
				case aside.Err != nil:
					fmt.Fprintf(cmd.ErrOrStderr(), "cannot move an earlier incarnation's dump of rank %d aside to %s; it is overwritten: %v\n", f.Rank, aside.To, aside.Err)
				default:
					fmt.Fprintf(cmd.ErrOrStderr(), "moved the dump of rank %d of job %q incarnation %d aside to %s\n", f.Rank, aside.Job, aside.Incarnation, aside.To)
				}
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s and its %s\n", path, dumpfile.TextExt)
			}
			if !asJSON {
				Text(cmd.OutOrStdout(), p, o)
				return nil
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false) // "<module>", not "\u003cmodule\u003e"
			return enc.Encode(f)
		},
	}
	cmd.Flags().IntVar(&pid, "pid", 0, "process to dump")
	cmd.Flags().BoolVar(&nativeOnly, "native", false, "native stacks (with --python: both, the default)")
	cmd.Flags().BoolVar(&pythonOnly, "python", false, "Python stacks (with --native: both, the default)")
	cmd.Flags().BoolVar(&lines, "lines", false, "native frames with source lines, inlined calls and tail calls from the debug information, as gdb (a first dump reads it: slower)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the dump file's JSON (docs/stacktrace-schema.md), reason \"manual\"")
	cmd.Flags().StringVar(&outDir, "out", "", "also write RRRRR-WWWWW.stacktrace and .txt into this directory, as the agent does (an earlier incarnation's files of the rank moved aside), for the viewer")
	return cmd
}

// Standalone is the dump command as the binary xpu-timer-dump, which
// links the stack capture alone: none of the agent's probes, metrics and
// GPU libraries, whose start-up (package initialisation, the pages of a
// binary three times the size) was a fifth of a first dump's time and
// half of its memory. Run with args (os.Args) whose first argument is
// "dump", it is `xpu-timer dump`, as xpu-timer hands it over
// (cmd/internal/leandump): the dump command under a root named xpu-timer,
// so that its usage, help and messages read as the full binary's.
func Standalone(args []string) *cobra.Command {
	if len(args) > 1 && args[1] == "dump" {
		root := &cobra.Command{Use: "xpu-timer", SilenceUsage: true}
		root.AddCommand(New())
		return root
	}
	cmd := New()
	cmd.Use = "xpu-timer-dump --pid PID"
	return cmd
}

// File is the dump file of p, as the agent writes it, with reason
// "manual", so that the viewer merges it with the agent's dumps: rank,
// world size and labels from p's environment (what the launcher would
// have used; a process without RANK is rank 0 of 1, as a single process
// is), the host name from this machine. What could not be read is in its
// errors.
func File(p *dump.Process) *dumpfile.File {
	env, err := procfs.Environ(p.PID)
	id, l := identity.Of(env), identity.LabelsOf(env)
	if !id.FromEnv {
		id.Rank = 0
	}
	host, _ := os.Hostname()
	f := dump.File(p.PID, dump.Header{Rank: id.Rank, WorldSize: max(id.World, id.Rank+1), LocalRank: id.Local(), LocalWorldSize: id.LocalWorld,
		Host: host, IP: l.IP, JobName: l.JobName, PodName: l.PodName}, p, nil)
	f.Schema, f.Reason = dumpfile.Schema, dumpfile.ReasonManual
	f.DumpedAt, f.DumpDuration = time.Now(), p.Took
	if err != nil {
		f.Errors = append(f.Errors, fmt.Sprintf("identity: %v", err))
	}
	return f
}

// Text writes a process's stacks the way py-spy dump does, in one write
// where it can (a line a write was 140 system calls a dump).
func Text(out io.Writer, p *dump.Process, o dump.Options) {
	w := bufio.NewWriter(out)
	defer w.Flush()
	fmt.Fprintf(w, "Process %d: %s", p.PID, p.State)
	if p.Python != "" {
		fmt.Fprintf(w, ", Python %s", p.Python)
	}
	fmt.Fprintf(w, " (stopped %v, took %v)\n", p.StoppedFor.Round(1000), p.Took.Round(1000))
	for _, e := range p.Errors {
		fmt.Fprintf(w, "error: %s\n", e)
	}
	for _, th := range p.Threads {
		fmt.Fprintf(w, "\nThread %d (%s)", th.TID, th.State)
		if th.Name != "" {
			fmt.Fprintf(w, ": %q", th.Name)
		}
		if th.GIL {
			fmt.Fprint(w, " [has GIL]")
		}
		fmt.Fprintln(w)
		if th.Error != "" {
			fmt.Fprintf(w, "    (%s)\n", th.Error)
		}
		frames := th.Merged
		switch {
		case o.NoPython || len(frames) == 0 && len(th.Python) == 0:
			frames = th.Native
		case o.NoNative || len(frames) == 0:
			frames = th.Python
		}
		for _, f := range frames {
			fmt.Fprintf(w, "    %s\n", FrameText(f))
		}
	}
}

// FrameText renders one frame: `func (file:line)` or `func (module+0xoff)`.
func FrameText(f stack.Frame) string {
	var b strings.Builder
	b.WriteString(f.Func)
	switch {
	case f.File != "" && f.Line > 0:
		fmt.Fprintf(&b, " (%s:%d)", f.File, f.Line)
	case f.File != "":
		fmt.Fprintf(&b, " (%s)", f.File)
	case f.Module != "":
		fmt.Fprintf(&b, " (%s)", f.Module)
	case f.Addr != 0:
		fmt.Fprintf(&b, " (%#x)", f.Addr)
	}
	if f.Func == "??" && f.Addr != 0 && (f.File != "" || f.Module != "") {
		fmt.Fprintf(&b, " at %#x", f.Addr)
	}
	return b.String()
}

// exitError turns a failed capture into the exit status (package exitcode)
// and message.
func exitError(pid int, err error) error {
	switch {
	case errors.Is(err, dump.ErrNoProcess):
		return exitcode.With(exitcode.NoProcess, fmt.Errorf("process %d does not exist", pid))
	case errors.Is(err, dump.ErrNotPermitted):
		return exitcode.With(exitcode.NotPermitted, fmt.Errorf("not permitted to trace process %d (run as root or with CAP_SYS_PTRACE)", pid))
	case errors.Is(err, dump.ErrExited):
		return exitcode.With(exitcode.NoProcess, fmt.Errorf("process %d exited during the dump", pid))
	}
	return err
}

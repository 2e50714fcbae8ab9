// Package viewercmd is the xpu_timer_stacktrace_viewer command: it merges
// every rank's hang dump in a directory into folded stacks, flame graphs, a
// pprof profile and the culprit report.
package viewercmd

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"

	"github.com/xpu-timer/xpu-timer/viewer"
	"github.com/xpu-timer/xpu-timer/viewer/flame"
	"github.com/xpu-timer/xpu-timer/viewer/svg"
)

// New returns the command.
func New() *cobra.Command {
	var (
		dir, out, weight string
		width, inc       int
	)
	cmd := &cobra.Command{
		Use:   "xpu_timer_stacktrace_viewer [--path DIR]",
		Short: "Merge every rank's stack dump into flame graphs and name the culprit",
		Long: `Reads every *.stacktrace file in --path (one per rank, named RRRRR-WWWWW.stacktrace)
and writes into --out (default: --path):
  cpp_stack, py_stack, mixed_stack   folded stacks (flamegraph.pl / inferno input)
  cpp_stack.svg, py_stack.svg, mixed_stack.svg   interactive flame graphs
  stacks.pb.gz                       pprof profile (go tool pprof), rank sets as labels
  summary.txt                        the culprit report, also printed
Frames are labelled func@file@STUCK|LEAK: the ranks that reached the frame and all others.
DLRover xpu_timer's own protobuf .stacktrace files are read too, and merged with ours.
Dumps of several runs in one directory (job, restart incarnation, world size) are listed;
the newest is merged unless --incarnation says otherwise. Entries that are not regular
files in --path (symbolic links, FIFOs, directories) are skipped and named.`,
		SilenceUsage: true,
		Args:         cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var w flame.Weight
			switch weight {
			case "stacks":
				w = flame.Stacks
			case "ranks":
				w = flame.Ranks
			default:
				return exitcode.Usagef("--weight %q: want stacks or ranks", weight)
			}
			if width != 0 && width < 200 {
				return exitcode.Usagef("--width %d: want at least 200", width)
			}
			o := viewer.Options{Dir: dir, Out: out, Weight: w, Width: width}
			if inc >= 0 {
				o.Incarnation = &inc
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			res, err := viewer.Run(o)
			if res != nil {
				for _, s := range res.Skipped {
					log.Warn("skipped stack file", "file", s.Path, "err", s.Err)
				}
				for _, c := range res.Conflicts {
					log.Warn("conflicting stack files", "conflict", c)
				}
			}
			if err != nil {
				return err
			}
			io.WriteString(cmd.OutOrStdout(), res.Summary)
			for _, p := range res.Outputs {
				log.Info("wrote", "file", p)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&dir, "path", "p", "./", "directory holding the *.stacktrace files")
	f.StringVar(&out, "out", "", "directory for the outputs (default: --path)")
	f.StringVar(&weight, "weight", "ranks", "what flame widths count: ranks (a stack as wide as the ranks that have it: one odd rank is a thin bar) or stacks (each distinct stack 1, xpu_timer's look)")
	f.IntVar(&width, "width", 0, fmt.Sprintf("SVG width in pixels (default: at least %d, wider where that keeps a one-rank bar's rank sets readable)", svg.DefaultWidth))
	f.IntVar(&inc, "incarnation", -1, "merge the dumps of this restart incarnation (default: the newest)")
	return cmd
}

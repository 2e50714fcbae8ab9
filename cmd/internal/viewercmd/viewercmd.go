// Package viewercmd is the xpu_timer_stacktrace_viewer command: it merges
// every rank's hang dump in a directory into folded stacks, flame graphs, a
// pprof profile and the culprit report.
package viewercmd

import (
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"

	"github.com/xpu-timer/xpu-timer/viewer"
	"github.com/xpu-timer/xpu-timer/viewer/flame"
)

// New returns the command.
func New() *cobra.Command {
	var (
		dir, out, weight string
		width            int
	)
	cmd := &cobra.Command{
		Use:   "xpu_timer_stacktrace_viewer --path DIR",
		Short: "Merge every rank's stack dump into flame graphs and name the culprit",
		Long: `Reads every *.stacktrace file in --path (one per rank, named RRRRR-WWWWW.stacktrace)
and writes into --out (default: --path):
  cpp_stack, py_stack, mixed_stack   folded stacks (flamegraph.pl / inferno input)
  cpp_stack.svg, py_stack.svg, mixed_stack.svg   interactive flame graphs
  stacks.pb.gz                       pprof profile (go tool pprof), rank sets as labels
  summary.txt                        the culprit report, also printed
Frames are labelled func@file@STUCK|LEAK: the ranks that reached the frame and all others.`,
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
			if width < 200 {
				return exitcode.Usagef("--width %d: want at least 200", width)
			}
			log := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
			res, err := viewer.Run(viewer.Options{Dir: dir, Out: out, Weight: w, Width: width})
			if res != nil {
				for _, s := range res.Skipped {
					log.Warn("skipped stack file", "file", s.Path, "err", s.Err)
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
	f.StringVar(&dir, "path", "", "directory holding the *.stacktrace files (required)")
	f.StringVar(&out, "out", "", "directory for the outputs (default: --path)")
	f.StringVar(&weight, "weight", "stacks", "what flame widths count: stacks (each distinct stack 1, as xpu_timer) or ranks")
	f.IntVar(&width, "width", 1200, "SVG width in pixels")
	cmd.MarkFlagRequired("path")
	return cmd
}

// Package cli assembles the xpu-timer command tree.
package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
)

// NewRoot returns the `xpu-timer` root command with every subcommand. Run
// without one, or with an unknown one, it is a usage error.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:          "xpu-timer",
		Short:        "Hang detector for distributed GPU training, built on eBPF",
		SilenceUsage: true,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return exitcode.Usagef("unknown command %q", args[0])
			}
			return nil
		},
		RunE: func(c *cobra.Command, _ []string) error {
			fmt.Fprint(c.ErrOrStderr(), c.UsageString())
			return exitcode.Usagef("no command given")
		},
	}
	root.AddCommand(subcommands()...)
	return root
}

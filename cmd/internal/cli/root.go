// Package cli assembles the xpu-timer command tree.
package cli

import (
	"github.com/spf13/cobra"
)

// NewRoot returns the `xpu-timer` root command with every subcommand.
func NewRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "xpu-timer",
		Short:         "Hang detector for distributed GPU training, built on eBPF",
		SilenceUsage:  true,
		SilenceErrors: false,
	}
	root.AddCommand(subcommands()...)
	return root
}

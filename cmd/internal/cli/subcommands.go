package cli

import "github.com/spf13/cobra"

// subcommands lists the subcommands of xpu-timer, one package each.
func subcommands() []*cobra.Command {
	return []*cobra.Command{}
}

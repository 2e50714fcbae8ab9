package cli

import (
	"github.com/spf13/cobra"

	"github.com/xpu-timer/xpu-timer/cmd/internal/agentcmd"
	"github.com/xpu-timer/xpu-timer/cmd/internal/dumpcmd"
	"github.com/xpu-timer/xpu-timer/cmd/internal/watch"
)

// subcommands lists the subcommands of xpu-timer, one package each.
func subcommands() []*cobra.Command {
	return []*cobra.Command{
		watch.New(),
		agentcmd.New(),
		dumpcmd.New(),
	}
}

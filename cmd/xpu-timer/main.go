// Command xpu-timer watches, dumps and monitors GPU training processes.
package main

import (
	"os"

	"github.com/xpu-timer/xpu-timer/cmd/internal/cli"
)

func main() { os.Exit(cli.Execute(cli.NewRoot())) }

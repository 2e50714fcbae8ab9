// Command xpu-timer watches, dumps and monitors GPU training processes.
package main

import (
	"os"

	"github.com/xpu-timer/xpu-timer/cmd/internal/cli"
	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
	_ "github.com/xpu-timer/xpu-timer/cmd/internal/leandump" // `xpu-timer dump` runs as xpu-timer-dump
)

func main() { os.Exit(exitcode.Execute(cli.NewRoot())) }

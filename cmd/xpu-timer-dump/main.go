// Command xpu-timer-dump is `xpu-timer dump` in a binary of its own, for a
// one-shot dump from a shell (see dumpcmd.Standalone).
package main

import (
	"os"

	"github.com/xpu-timer/xpu-timer/cmd/internal/dumpcmd"
	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
)

func main() { os.Exit(exitcode.Execute(dumpcmd.Standalone())) }

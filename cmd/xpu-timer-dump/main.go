// Command xpu-timer-dump is `xpu-timer dump` in a binary of its own, for a
// one-shot dump from a shell (see dumpcmd.Standalone); xpu-timer runs it
// for `xpu-timer dump` when it lies beside it (cmd/internal/leandump).
package main

import (
	"os"

	"github.com/xpu-timer/xpu-timer/cmd/internal/dumpcmd"
	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
)

func main() { os.Exit(exitcode.Execute(dumpcmd.Standalone(os.Args))) }

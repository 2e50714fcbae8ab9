// Command xpu_timer_launch runs a training command and detects, dumps and
// reports its hangs: xpu_timer_launch [flags] CMD ARGS...
package main

import (
	"os"

	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
	"github.com/xpu-timer/xpu-timer/cmd/internal/launch"
)

func main() { os.Exit(exitcode.Execute(launch.New())) }

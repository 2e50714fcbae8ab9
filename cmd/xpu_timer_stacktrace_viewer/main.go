// Command xpu_timer_stacktrace_viewer merges every rank's hang dump into
// flame graphs and a culprit report.
package main

import (
	"os"

	"github.com/xpu-timer/xpu-timer/cmd/internal/exitcode"
	"github.com/xpu-timer/xpu-timer/cmd/internal/viewercmd"
)

func main() { os.Exit(exitcode.Execute(viewercmd.New())) }

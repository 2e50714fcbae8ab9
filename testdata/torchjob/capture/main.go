// Command capture dumps live ranks into RRRRR-WWWWW.stacktrace files the way
// the agent writes them (reason "manual"), for the viewer's corpus of real
// hangs:
//
//	go run ./testdata/torchjob/capture -out DIR -world 4 [-job J] [-incarnation N] RANK:PID ...
//
// It needs root (ptrace).
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/dump"
	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/procfs"
)

func main() {
	out := flag.String("out", ".", "directory for the dump files")
	world := flag.Int("world", 0, "world size")
	job := flag.String("job", "", "job name")
	inc := flag.Int("incarnation", 0, "incarnation")
	flag.Parse()
	host, _ := os.Hostname()
	failed := false
	for _, arg := range flag.Args() {
		r, p, ok := strings.Cut(arg, ":")
		rank, err1 := strconv.Atoi(r)
		pid, err2 := strconv.Atoi(p)
		if !ok || err1 != nil || err2 != nil {
			fmt.Fprintf(os.Stderr, "capture: %q: want RANK:PID\n", arg)
			os.Exit(2)
		}
		start := time.Now()
		f := &dumpfile.File{Rank: rank, WorldSize: *world, LocalRank: rank, LocalWorldSize: *world, Host: host, PID: pid,
			Job: *job, Incarnation: *inc, Reason: "manual"}
		f.Cmdline, _ = procfs.Cmdline(pid)
		c, err := dump.Capture(pid, dump.Options{Lines: true}) // as the agent
		if err != nil {
			fmt.Fprintf(os.Stderr, "capture: rank %d pid %d: %v\n", rank, pid, err)
			failed = true
			continue
		}
		f.State, f.Threads, f.StoppedFor, f.Errors = c.State, c.Threads, c.StoppedFor, c.Errors
		f.DumpedAt, f.DumpDuration = time.Now().UTC(), time.Since(start)
		path, err := dumpfile.Write(*out, f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "capture: %v\n", err)
			failed = true
			continue
		}
		fmt.Printf("%s: %d threads, %d errors, %v\n", path, len(f.Threads), len(f.Errors), f.DumpDuration.Round(time.Millisecond))
	}
	if failed {
		os.Exit(1)
	}
}

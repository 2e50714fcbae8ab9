package testbed

import (
	"os"
	"path/filepath"
	"strconv"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// Thread is one thread of a process as /proc shows it.
type Thread struct {
	TID   int
	Name  string // comm
	State string // R, S, D, ...
	WChan string // kernel function it sleeps in, "0" when running
}

// Threads lists the threads of pid from /proc, by thread id.
func Threads(pid int) ([]Thread, error) {
	tids, err := procfs.Tasks(pid)
	if err != nil {
		return nil, err
	}
	var ts []Thread
	for _, tid := range tids {
		st, err := procfs.ReadTaskStat(pid, tid)
		if err != nil {
			continue // exited meanwhile
		}
		wchan, _ := os.ReadFile(filepath.Join(procfs.Root, strconv.Itoa(pid), "task", strconv.Itoa(tid), "wchan"))
		ts = append(ts, Thread{TID: tid, Name: st.Comm, State: string(st.State), WChan: string(wchan)})
	}
	return ts, nil
}

package testbed

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Thread is one thread of a process as /proc shows it.
type Thread struct {
	TID   int
	Name  string // comm
	State string // R, S, D, ...
	WChan string // kernel function it sleeps in, "0" when running
}

// Threads lists the threads of pid from /proc.
func Threads(pid int) ([]Thread, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list threads of %d: %w", pid, err)
	}
	var ts []Thread
	for _, e := range ents {
		tid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(dir, e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		s := string(stat)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open || close+2 >= len(s) {
			continue
		}
		wchan, _ := os.ReadFile(filepath.Join(dir, e.Name(), "wchan"))
		ts = append(ts, Thread{TID: tid, Name: s[open+1 : close], State: s[close+2 : close+3], WChan: string(wchan)})
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].TID < ts[j].TID })
	return ts, nil
}

package agent

import (
	"fmt"
	"syscall"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// KillGroup ends the process group of pid with SIGKILL. When pid shares the
// caller's own group (a launcher whose job runs in the launcher's group),
// it kills pid and its descendants instead, so the caller survives to
// report the exit status.
func KillGroup(pid int) error {
	st, err := procfs.ReadStat(pid)
	if err != nil {
		return fmt.Errorf("kill %d: %w", pid, err)
	}
	if st.PGID > 1 && st.PGID != syscall.Getpgrp() {
		if err := syscall.Kill(-st.PGID, syscall.SIGKILL); err != nil {
			return fmt.Errorf("kill process group %d: %w", st.PGID, err)
		}
		return nil
	}
	return KillTree(pid)
}

// KillTree ends pid and every descendant with SIGKILL.
func KillTree(pid int) error {
	pids := append([]int{pid}, procfs.Descendants(pid)...)
	var first error
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil && err != syscall.ESRCH && first == nil {
			first = fmt.Errorf("kill %d: %w", p, err)
		}
	}
	return first
}

// kill ends pid's group once (HangKill).
func (a *Agent) kill(pid int) {
	a.mu.Lock()
	done := a.killed[pid]
	a.killed[pid] = true
	a.mu.Unlock()
	if done {
		return
	}
	err := a.o.Kill(pid)
	r := Report{Event: EventKill, PID: pid}
	if id, ok := a.identity(pid); ok {
		r.setRank(id)
	}
	if err != nil {
		r.Error = err.Error()
		a.log.Error("hang kill", "pid", pid, "err", err)
	} else {
		a.log.Warn("hang kill: process group ended after its dump", "pid", pid)
	}
	a.report(r)
}

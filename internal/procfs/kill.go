package procfs

import (
	"fmt"
	"syscall"
)

// KillGroup ends the process group of pid with SIGKILL (the agent's
// HangKill). When pid shares the
// caller's own group (a launcher whose job runs in the launcher's group),
// it kills pid and its descendants instead, so the caller survives to
// report the exit status.
func KillGroup(pid int) error {
	st, err := ReadStat(pid)
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
	pids := append([]int{pid}, Descendants(pid)...)
	var first error
	for _, p := range pids {
		if err := syscall.Kill(p, syscall.SIGKILL); err != nil && err != syscall.ESRCH && first == nil {
			first = fmt.Errorf("kill %d: %w", p, err)
		}
	}
	return first
}

// Alive says whether pid exists and is neither a zombie nor dead.
func Alive(pid int) bool {
	st, err := ReadStat(pid)
	return err == nil && st.State != 'Z' && st.State != 'X'
}

// ParentPython reads pid's parent and whether its executable is a Python
// interpreter; 0 and false when its stat cannot be read.
func ParentPython(pid int) (int, bool) {
	st, err := ReadStat(pid)
	if err != nil {
		return 0, false
	}
	exe, _ := Exe(pid)
	return st.PPID, RunsPython(exe)
}

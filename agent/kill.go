package agent

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

//go:build linux && (386 || amd64)

package ebpf

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Holding a process while its new code is probed (probes.bpf.c,
// hold_alive): the exec and loader programs stop a followed process with
// SIGSTOP and say so in their record; the tracer probes what the process
// mapped and resumes it with SIGCONT. A library's first call is then seen
// however soon after its dlopen it comes, and the libraries a program is
// linked to are probed before its main runs.

// beatEvery bounds how often the reader's turns are written for the
// programs (hold_alive); far below the 5 s after which they hold no more
// (HOLD_ALIVE_NS in probes.bpf.c): a reader that is gone or stuck longer
// stops no process.
const beatEvery = 100 * time.Millisecond

// staleHold is how long a process may stay held, with no record left to
// read, before beat resumes it anyway: only a record that never comes (a
// bug) leaves it there.
const staleHold = time.Second

// Library roles for the holds: a process with both a driver and a
// collective library probed has nothing left whose first call could be
// missed, and is no longer held.
const (
	roleDriver uint8 = 1 << iota
	roleCollective
	roleComplete = roleDriver | roleCollective
)

// roleOf is the role a probe gives the library it is attached in.
func roleOf(p probe) uint8 {
	switch p.Group {
	case "driver":
		return roleDriver
	case "collective":
		return roleCollective
	}
	return 0
}

// holds is the programs' side of the holds: the reader's beat (the map
// hold_alive), the processes held (held) and those never held (unheld).
// Its lock is its own: the reader beats under it, never under the
// follower's, and Close stops the holds under it even while the follower
// is stuck.
type holds struct {
	alive, held, unheld *ebpf.Map
	off                 bool // Options.noHold

	// turn is when the follower last turned (monotonic ns): a beat says
	// no more than that, so that a follower stuck longer than the
	// programs' bound (a scan) stops no process either.
	turn atomic.Int64

	mu       sync.Mutex
	lastBeat time.Time
	stopped  bool // Close began: hold no more
}

// turned tells the holds that the follower is at work (its goroutine).
func (h *holds) turned() { h.turn.Store(int64(monotonicNow())) }

// beat tells the programs that a reader runs, at most every beatEvery
// (from Run's goroutine), and a follower turns: processes are held only
// while Run reads and the follower follows.
func (h *holds) beat() {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped || h.off || now.Sub(h.lastBeat) < beatEvery {
		return
	}
	h.lastBeat = now
	_ = h.alive.Put(uint32(0), min(monotonicNow(), uint64(h.turn.Load())))
}

// stop makes the programs hold no process any more (Close).
func (h *holds) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stopped = true
	_ = h.alive.Put(uint32(0), uint64(0))
}

// stopReading is stop for a Run that returns while the tracer stays
// open: no reader, no holds; a next Run starts them again.
func (h *holds) stopReading() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastBeat = time.Time{}
	_ = h.alive.Put(uint32(0), uint64(0))
	h.resumeHeld(0)
}

// resume lets a held process go on.
func (h *holds) resume(pid int) error {
	_ = h.held.Delete(uint32(pid))
	if err := unix.Kill(pid, unix.SIGCONT); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("resume held process: %w", err)
	}
	return nil
}

// resumeHeld resumes every process the programs hold whose hold began
// before cutoff (monotonic ns; 0: every one): those whose record was
// never read, as a safety net, and all of them at Close.
func (h *holds) resumeHeld(cutoff uint64) {
	var pid uint32
	var since uint64
	var stale []uint32
	it := h.held.Iterate()
	for it.Next(&pid, &since) {
		if cutoff == 0 || since < cutoff {
			stale = append(stale, pid)
		}
	}
	for _, p := range stale {
		_ = h.held.Delete(p)
		_ = unix.Kill(int(p), unix.SIGCONT)
	}
}

// exempt stops holding pid: until it execs (probesUnheldWhyUNHELD_COMPLETE)
// or for good (probesUnheldWhyUNHELD_INTERACTIVE). In a full map it is
// held on, as any process.
func (h *holds) exempt(pid int, why probesUnheldWhy) {
	_ = h.unheld.Update(uint32(pid), uint8(why), ebpf.UpdateAny)
}

// unexempt forgets pid (exit).
func (h *holds) unexempt(pid int) {
	_ = h.unheld.Delete(uint32(pid))
}

// probedAll says whether p has nothing left to hold for: a driver and a
// collective library probed; f.mu held.
func (f *follower) probedAll(p *process) bool {
	var roles uint8
	for k := range p.libs {
		if l := f.libs[k]; l != nil {
			roles |= l.roles
		}
	}
	return roles&roleComplete == roleComplete
}

// interactiveChild says whether pid is a child of an interactive shell:
// a process on a terminal whose parent leads its session. Job control
// would take our stop for the user's ("Stopped", the prompt back), so it
// is never held; what it runs is held as any process.
func interactiveChild(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ppid pgrp session tty_nr ...: comm may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := bytes.Fields(b[i+1:])
	if len(f) < 5 {
		return false
	}
	ppid, _ := strconv.Atoi(string(f[1]))
	session, _ := strconv.Atoi(string(f[3]))
	tty, _ := strconv.Atoi(string(f[4]))
	return tty != 0 && ppid == session
}

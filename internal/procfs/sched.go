package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
)

// ErrNoSchedClock reports a sched file without se.exec_start (a kernel
// built without CONFIG_SCHED_DEBUG).
var ErrNoSchedClock = errors.New("no scheduler clock in sched")

// Sched is a thread's scheduler accounting, read without stopping it.
type Sched struct {
	RunNs uint64 // time spent on a CPU
	Runs  uint64 // times put on a CPU (timeslices)
}

// ReadSched reads /proc/PID/task/TID/schedstat.
func ReadSched(pid, tid int) (Sched, error) {
	b, err := read(path(pid, "task", strconv.Itoa(tid), "schedstat"))
	if err != nil {
		return Sched{}, err
	}
	return ParseSched(b)
}

// ParseSched parses the text of a schedstat file: run time (ns), wait
// time (ns), timeslices.
func ParseSched(b []byte) (Sched, error) {
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return Sched{}, fmt.Errorf("parse schedstat %q: want 3 fields", b)
	}
	run, err1 := strconv.ParseUint(f[0], 10, 64)
	runs, err2 := strconv.ParseUint(f[2], 10, 64)
	if err1 != nil || err2 != nil {
		return Sched{}, fmt.Errorf("parse schedstat %q: not numbers", b)
	}
	return Sched{RunNs: run, Runs: runs}, nil
}

// ReadSleeps reads, from /proc/PID/task/TID/status, how many times the
// thread went to sleep so far: its voluntary context switches. A thread
// preempted while it runs (on a busy CPU) switches involuntarily, so a
// sleeping thread woken only to sleep again at the same place counts one
// per wake, however the scheduler treated it meanwhile; schedstat's
// timeslices count each preemption too.
func ReadSleeps(pid, tid int) (uint64, error) {
	b, err := read(path(pid, "task", strconv.Itoa(tid), "status"))
	if err != nil {
		return 0, err
	}
	return ParseSleeps(b)
}

// ParseSleeps finds voluntary_ctxt_switches in the text of a status file.
func ParseSleeps(b []byte) (uint64, error) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		v, ok := bytes.CutPrefix(line, []byte("voluntary_ctxt_switches:"))
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse voluntary_ctxt_switches %q", v)
		}
		return n, nil
	}
	return 0, errors.New("no voluntary_ctxt_switches in status")
}

// ReadSyscall reads /proc/PID/task/TID/syscall: for a thread blocked in
// a system call, its number, arguments, stack pointer and instruction
// pointer ("running" while it runs). The kernel reads it without
// stopping or waking the thread; it needs ptrace access to the process.
func ReadSyscall(pid, tid int) (string, error) {
	b, err := read(path(pid, "task", strconv.Itoa(tid), "syscall"))
	if err != nil {
		return "", err
	}
	return string(bytes.TrimSpace(b)), nil
}

// ReadLastRan reads, from /proc/PID/task/TID/sched (kernels built with
// CONFIG_SCHED_DEBUG), when the thread last went on a CPU, in the
// scheduler's clock (nanoseconds since boot, close to CLOCK_MONOTONIC).
func ReadLastRan(pid, tid int) (int64, error) {
	b, err := read(path(pid, "task", strconv.Itoa(tid), "sched"))
	if err != nil {
		return 0, err
	}
	return ParseLastRan(b)
}

// ReadOwnLastRan is ReadLastRan for the calling thread: as it runs now,
// the scheduler clock's reading of about now.
func ReadOwnLastRan() (int64, error) {
	b, err := read(Root + "/thread-self/sched")
	if err != nil {
		return 0, err
	}
	return ParseLastRan(b)
}

// ParseLastRan finds se.exec_start (milliseconds with six decimals) in the
// text of a sched file and returns it in nanoseconds.
func ParseLastRan(b []byte) (int64, error) {
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(":"))
		if !ok || string(bytes.TrimSpace(k)) != "se.exec_start" {
			continue
		}
		ms, frac, _ := strings.Cut(string(bytes.TrimSpace(v)), ".")
		whole, err := strconv.ParseInt(ms, 10, 64)
		if err != nil || whole < 0 || whole > 1<<40 {
			return 0, fmt.Errorf("parse se.exec_start %q", v)
		}
		frac = (frac + "000000")[:6]
		ns, err := strconv.ParseInt(frac, 10, 64)
		if err != nil || ns < 0 {
			return 0, fmt.Errorf("parse se.exec_start %q", v)
		}
		return whole*1_000_000 + ns, nil
	}
	return 0, fmt.Errorf("no se.exec_start: %w", ErrNoSchedClock)
}

// timedSleeps are, by architecture, the system calls in which a thread
// waits for time alone: nanosleep and clock_nanosleep, and select, pselect6,
// poll and ppoll given no descriptor (what Python's time.sleep calls).
var timedSleeps = map[string]struct{ nanosleep, clockNanosleep, selectCall, pselect6, poll, ppoll int }{
	"amd64": {35, 230, 23, 270, 7, 271},
	"arm64": {101, 115, -1, 72, -1, 73},
}

// TimedSleep says whether site, as ReadSyscall gives it ("NR arg1 ...
// arg6 sp pc"), is a sleep for time alone: the thread waits for nothing
// another thread or process could give it.
func TimedSleep(site string) bool {
	n, ok := timedSleeps[runtime.GOARCH]
	if !ok {
		return false
	}
	f := strings.Fields(site)
	if len(f) < 7 {
		return false
	}
	nr, err := strconv.Atoi(f[0])
	if err != nil {
		return false
	}
	null := func(i int) bool {
		v, err := strconv.ParseUint(strings.TrimPrefix(f[i], "0x"), 16, 64)
		return err == nil && v == 0
	}
	switch nr {
	case n.nanosleep, n.clockNanosleep:
		return true
	case n.selectCall, n.pselect6: // (nfds, readfds, writefds, exceptfds, timeout): no set
		return null(2) && null(3) && null(4)
	case n.poll, n.ppoll: // (fds, nfds, timeout): no descriptor
		return null(2)
	}
	return false
}

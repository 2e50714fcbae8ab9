package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// proc is a started command in a process group of its own, with every line
// of its stdout and stderr stamped as it arrives.
type proc struct {
	*testutil.Group
	t     testing.TB
	cmd   *exec.Cmd
	store string // the fake NCCL's store of the job under it
}

// start runs args with env added; store is the job's XPU_FAKEGPU_STORE,
// created here. Cleanup kills the group and removes what the job left.
func start(t testing.TB, args []string, env ...string) *proc {
	t.Helper()
	store, err := os.MkdirTemp("", "xpufake-store-")
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, store: store}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Env = append(append(os.Environ(), "XPU_FAKEGPU_STORE="+store), env...)
	if p.Group, err = testutil.StartGroup(p.cmd, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	return p
}

// wait returns the first line (in arrival order) that match accepts, or
// fails the test after timeout or when the command exited without one.
func (p *proc) wait(what string, timeout time.Duration, match func(testutil.Line) bool) testutil.Line {
	p.t.Helper()
	var found testutil.Line
	seen := 0
	p.until(what, timeout, func() bool {
		for _, l := range p.Lines(seen) {
			seen++
			if match(l) {
				found = l
				return true
			}
		}
		return false
	})
	return found
}

// until waits until cond (called without the lock, after every new line)
// holds, or fails the test after timeout or when the command exited first.
func (p *proc) until(what string, timeout time.Duration, cond func() bool) {
	p.t.Helper()
	if err := p.Until(timeout, cond); err != nil {
		p.t.Fatalf("waiting for %s: %v\n%s", what, err, p.output())
	}
}

// waitRe waits for a line matching re.
func (p *proc) waitRe(re *regexp.Regexp, timeout time.Duration) testutil.Line {
	p.t.Helper()
	return p.wait(re.String(), timeout, func(l testutil.Line) bool { return re.MatchString(l.Text) })
}

// matching returns the lines so far that match re.
func (p *proc) matching(re *regexp.Regexp) []testutil.Line {
	var out []testutil.Line
	for _, l := range p.Lines(0) {
		if re.MatchString(l.Text) {
			out = append(out, l)
		}
	}
	return out
}

// output is everything the command wrote, for failure messages.
func (p *proc) output() string { return p.Output() }

// stdout is what the command wrote on stdout.
func (p *proc) stdout() []string {
	var out []string
	for _, l := range p.Lines(0) {
		if !l.Stderr {
			out = append(out, l.Text)
		}
	}
	return out
}

// waitExit waits for the command's exit status.
func (p *proc) waitExit(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.Done():
	case <-time.After(timeout):
		p.t.Fatalf("the command did not exit within %v\n%s", timeout, p.output())
	}
	_, code := p.Exited()
	return code
}

// end ends the job the way an operator does, with SIGTERM to the command,
// and checks that it ends cleanly: the command exits, no process of its
// group or its tree is left (mpirun puts its ranks in groups of their
// own), and once the segments a killed fake NCCL cannot remove are
// removed, none of the job's remains in /dev/shm.
func (p *proc) end(timeout time.Duration) int {
	p.t.Helper()
	tree := procfs.Descendants(p.cmd.Process.Pid)
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	code := p.waitExit(timeout)
	p.checkClean(tree...)
	return code
}

// checkClean checks, after the command exited, that no process of its
// group nor any of tree (its descendants, as they were) is left, and
// removes the job's segments and store.
func (p *proc) checkClean(tree ...int) {
	p.t.Helper()
	var left []int
	for range 100 { // a rank may still be on its way out
		left = group(p.cmd.Process.Pid)
		for _, pid := range tree {
			if st, err := procfs.ReadStat(pid); err == nil && st.State != 'Z' && st.State != 'X' && !slices.Contains(left, pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(left) > 0 {
		p.t.Errorf("processes of the job left after it ended: %v", describe(left))
	}
	segs := p.segments()
	testbed.RemoveSegments(segs)
	now, err := testbed.Segments()
	if err != nil {
		p.t.Fatal(err)
	}
	for _, s := range now {
		for _, mine := range segs {
			if s == mine {
				p.t.Errorf("segment /dev/shm/%s left", s)
			}
		}
	}
	os.RemoveAll(p.store)
}

// kill is the cleanup: the whole group, then the leftovers, its tree's
// too (mpirun's ranks, in groups of their own, would outlive it).
func (p *proc) kill() {
	tree := procfs.Descendants(p.cmd.Process.Pid)
	p.Kill()
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
	}
	for _, pid := range append(group(p.cmd.Process.Pid), tree...) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	testbed.RemoveSegments(p.segments())
	os.RemoveAll(p.store)
}

// segments names the fake NCCL's segments of the job: its communicator id
// is in the store.
func (p *proc) segments() []string { return testbed.StoreSegments(p.store) }

// group lists the live processes of process group pgid (zombies aside).
func group(pgid int) []int {
	pids, err := procfs.PIDs()
	if err != nil {
		return nil
	}
	var out []int
	for _, pid := range pids {
		st, err := procfs.ReadStat(pid)
		if err == nil && st.PGID == pgid && st.State != 'Z' && st.State != 'X' {
			out = append(out, pid)
		}
	}
	return out
}

func describe(pids []int) string {
	var parts []string
	for _, pid := range pids {
		cmd, _ := procfs.Cmdline(pid)
		parts = append(parts, fmt.Sprintf("%d %q", pid, strings.Join(cmd, " ")))
	}
	return strings.Join(parts, ", ")
}

// rankPIDs maps rank to pid from the started lines so far.
func (p *proc) rankPIDs() map[int]int {
	m := map[int]int{}
	for _, l := range p.Lines(0) {
		if r, pid, ok := testbed.Started(l.Text); ok {
			m[r] = pid
		}
	}
	return m
}

// stepDone returns when each rank finished step, for the ranks that did.
func (p *proc) stepDone(step int) map[int]time.Time {
	m := map[int]time.Time{}
	for _, l := range p.Lines(0) {
		if r, n, ok := testbed.StepDone(l.Text); ok && n == step {
			m[r] = l.At
		}
	}
	return m
}

// metricsURL is where the launcher serves /metrics, from its log line.
func (p *proc) metricsURL(timeout time.Duration) string {
	p.t.Helper()
	re := regexp.MustCompile(`msg="serving metrics".* addr=\S*:(\d+) `)
	l := p.waitRe(re, timeout)
	return "http://127.0.0.1:" + re.FindStringSubmatch(l.Text)[1] + "/metrics"
}

// exited says whether the command has exited.
func (p *proc) exited() bool {
	done, _ := p.Exited()
	return done
}

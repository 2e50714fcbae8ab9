package e2e

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
)

// line is one line a command wrote, stamped when it was read.
type line struct {
	at     time.Time
	stderr bool
	text   string
}

// proc is a started command in a process group of its own, with every line
// of its stdout and stderr stamped as it arrives.
type proc struct {
	t     *testing.T
	cmd   *exec.Cmd
	store string // the fake NCCL's store of the job under it

	mu    sync.Mutex
	lines []line
	wake  chan struct{} // closed on every new line and on exit
	done  bool
	code  int
	exit  chan struct{}
}

// start runs args with env added; store is the job's XPU_FAKEGPU_STORE,
// created here. Cleanup kills the group and removes what the job left.
func start(t *testing.T, args []string, env ...string) *proc {
	t.Helper()
	store, err := os.MkdirTemp("", "xpufake-store-")
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, store: store, wake: make(chan struct{}), exit: make(chan struct{})}
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Env = append(append(os.Environ(), "XPU_FAKEGPU_STORE="+store), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	outR, outW, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	p.cmd.Stdout, p.cmd.Stderr = outW, errW
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", args[0], err)
	}
	outW.Close()
	errW.Close()
	var readers sync.WaitGroup
	readers.Add(2)
	go p.read(outR, false, &readers)
	go p.read(errR, true, &readers)
	go func() {
		err := p.cmd.Wait()
		readers.Wait()
		p.mu.Lock()
		p.done, p.code = true, exitCode(p.cmd.ProcessState, err)
		p.signal()
		p.mu.Unlock()
		close(p.exit)
	}()
	t.Cleanup(p.kill)
	return p
}

func exitCode(ps *os.ProcessState, err error) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func (p *proc) read(r io.ReadCloser, stderr bool, wg *sync.WaitGroup) {
	defer wg.Done()
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		l := line{at: time.Now(), stderr: stderr, text: sc.Text()}
		p.mu.Lock()
		p.lines = append(p.lines, l)
		p.signal()
		p.mu.Unlock()
	}
}

// signal wakes the waiters; p.mu held.
func (p *proc) signal() {
	close(p.wake)
	p.wake = make(chan struct{})
}

// wait returns the first line (in arrival order) that match accepts, or
// fails the test after timeout or when the command exited without one.
func (p *proc) wait(what string, timeout time.Duration, match func(line) bool) line {
	p.t.Helper()
	var found line
	seen := 0
	p.until(what, timeout, func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		for ; seen < len(p.lines); seen++ {
			if match(p.lines[seen]) {
				found = p.lines[seen]
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
	deadline := time.After(timeout)
	for {
		p.mu.Lock()
		done, wake := p.done, p.wake
		p.mu.Unlock()
		if cond() {
			return
		}
		if done {
			p.t.Fatalf("waiting for %s: the command exited with %d\n%s", what, p.code, p.output())
		}
		select {
		case <-wake:
		case <-deadline:
			p.t.Fatalf("waiting for %s: nothing after %v\n%s", what, timeout, p.output())
		}
	}
}

// waitRe waits for a line matching re.
func (p *proc) waitRe(re *regexp.Regexp, timeout time.Duration) line {
	p.t.Helper()
	return p.wait(re.String(), timeout, func(l line) bool { return re.MatchString(l.text) })
}

// matching returns the lines so far that match re.
func (p *proc) matching(re *regexp.Regexp) []line {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []line
	for _, l := range p.lines {
		if re.MatchString(l.text) {
			out = append(out, l)
		}
	}
	return out
}

// output is everything the command wrote, for failure messages.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, l := range p.lines {
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	return b.String()
}

// stdout is what the command wrote on stdout.
func (p *proc) stdout() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, l := range p.lines {
		if !l.stderr {
			out = append(out, l.text)
		}
	}
	return out
}

// waitExit waits for the command's exit status.
func (p *proc) waitExit(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.exit:
	case <-time.After(timeout):
		p.t.Fatalf("the command did not exit within %v\n%s", timeout, p.output())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.code
}

// end ends the job the way an operator does, with SIGTERM to the command,
// and checks that it ends cleanly: the command exits, no process of its
// group is left, and once the segments a killed fake NCCL cannot remove
// are removed, none of the job's remains in /dev/shm.
func (p *proc) end(timeout time.Duration) int {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	code := p.waitExit(timeout)
	p.checkClean()
	return code
}

// checkClean checks, after the command exited, that no process of its
// group is left and removes the job's segments and store.
func (p *proc) checkClean() {
	p.t.Helper()
	var left []int
	for range 100 { // a rank may still be on its way out
		if left = group(p.cmd.Process.Pid); len(left) == 0 {
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

// kill is the cleanup: the whole group, then the leftovers.
func (p *proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-p.exit:
	case <-time.After(10 * time.Second):
	}
	for _, pid := range group(p.cmd.Process.Pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	testbed.RemoveSegments(p.segments())
	os.RemoveAll(p.store)
}

// segments names the fake NCCL's segments of the job: its communicator id
// is in the store.
func (p *proc) segments() []string {
	raw, err := os.ReadFile(filepath.Join(p.store, "nccl_id"))
	if err != nil || len(strings.TrimSpace(string(raw))) < 32 {
		return nil
	}
	id := strings.TrimSpace(string(raw))[:32]
	return []string{testbed.ShmPrefix + "cu-" + id, testbed.ShmPrefix + "mc-" + id}
}

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

// Progress lines of run.py.
var (
	startedRe = regexp.MustCompile(`^xpu-fakegpu rank=(\d+) pid=(\d+) started$`)
	stepRe    = regexp.MustCompile(`^xpu-fakegpu rank=(\d+) step=(\d+) done$`)
)

// rankPIDs maps rank to pid from the started lines so far.
func (p *proc) rankPIDs() map[int]int {
	m := map[int]int{}
	for _, l := range p.matching(startedRe) {
		s := startedRe.FindStringSubmatch(l.text)
		r, _ := strconv.Atoi(s[1])
		pid, _ := strconv.Atoi(s[2])
		m[r] = pid
	}
	return m
}

// stepDone returns when each rank finished step, for the ranks that did.
func (p *proc) stepDone(step int) map[int]time.Time {
	m := map[int]time.Time{}
	for _, l := range p.matching(stepRe) {
		s := stepRe.FindStringSubmatch(l.text)
		r, _ := strconv.Atoi(s[1])
		if n, _ := strconv.Atoi(s[2]); n == step {
			m[r] = l.at
		}
	}
	return m
}

// metricsURL is where the launcher serves /metrics, from its log line.
func (p *proc) metricsURL(timeout time.Duration) string {
	p.t.Helper()
	re := regexp.MustCompile(`msg="serving metrics".* addr=\S*:(\d+) `)
	l := p.waitRe(re, timeout)
	return "http://127.0.0.1:" + re.FindStringSubmatch(l.text)[1] + "/metrics"
}

// exited says whether the command has exited.
func (p *proc) exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

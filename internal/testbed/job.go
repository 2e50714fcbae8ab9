package testbed

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
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
)

// ErrTimeout is returned when a job does not reach a state in time.
var ErrTimeout = errors.New("timeout")

// ErrExited is returned when a job exited before reaching the awaited state.
var ErrExited = errors.New("job exited")

// JobOptions describe one run.py job.
type JobOptions struct {
	NProc, Steps int
	Vendor       string // "cuda" (default) or "maca"
	Fault        string // one of Faults, or empty
	FaultRank    int
	FaultStep    int
	Python       string   // interpreter, default python3
	Env          []string // extra environment
	Args         []string // extra run.py arguments (e.g. "--step-ms", "5")
}

func (o JobOptions) args(b *Bed) []string {
	a := []string{b.RunPy(), "--nproc", strconv.Itoa(orDefault(o.NProc, 4)), "--steps", strconv.Itoa(orDefault(o.Steps, 30)),
		"--lib-dir", b.Dir}
	if o.Vendor != "" {
		a = append(a, "--vendor", o.Vendor)
	}
	if o.Fault != "" {
		a = append(a, "--fault", o.Fault, "--fault-rank", strconv.Itoa(o.FaultRank), "--fault-step", strconv.Itoa(o.FaultStep))
	}
	return append(a, o.Args...)
}

func orDefault(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

// JobCommand returns the command of a job, not started, to be wrapped by a launcher.
func (b *Bed) JobCommand(o JobOptions) *exec.Cmd {
	py := o.Python
	if py == "" {
		py = "python3"
	}
	cmd := exec.Command(py, o.args(b)...)
	cmd.Env = append(os.Environ(), o.Env...)
	return cmd
}

// Job is a started run.py job in its own process group.
type Job struct {
	Cmd *exec.Cmd

	store string
	mu    sync.Mutex
	cond  *sync.Cond
	out   bytes.Buffer
	pids  map[int]int
	steps map[int]int // rank -> last step done
	done  bool
	code  int
	werr  error
	stop  sync.Once
	exit  chan struct{}
}

var (
	startedRe = regexp.MustCompile(`^xpu-fakegpu rank=(\d+) pid=(\d+) started$`)
	stepRe    = regexp.MustCompile(`^xpu-fakegpu rank=(\d+) step=(\d+) done$`)
)

// StartJob starts a job in its own process group; t.Cleanup stops it.
func (b *Bed) StartJob(t testing.TB, o JobOptions) *Job {
	t.Helper()
	j, err := b.Start(o)
	if err != nil {
		t.Fatalf("start job: %v", err)
	}
	t.Cleanup(j.Stop)
	return j
}

// Start starts a job in its own process group. The caller must Stop it.
func (b *Bed) Start(o JobOptions) (*Job, error) {
	store, err := os.MkdirTemp("", "xpufake-store-")
	if err != nil {
		return nil, fmt.Errorf("create store: %w", err)
	}
	o.Env = append(append([]string{}, o.Env...), "XPU_FAKEGPU_STORE="+store)
	j := &Job{Cmd: b.JobCommand(o), store: store, pids: map[int]int{}, steps: map[int]int{}, exit: make(chan struct{})}
	j.cond = sync.NewCond(&j.mu)
	j.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw, err := os.Pipe()
	if err != nil {
		os.RemoveAll(store)
		return nil, fmt.Errorf("pipe: %w", err)
	}
	j.Cmd.Stdout, j.Cmd.Stderr = pw, pw
	if err := j.Cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		os.RemoveAll(store)
		return nil, fmt.Errorf("start %s: %w", j.Cmd.Path, err)
	}
	pw.Close()
	readDone := make(chan struct{})
	go j.read(pr, readDone)
	go func() {
		err := j.Cmd.Wait()
		<-readDone
		j.mu.Lock()
		j.done, j.werr = true, err
		j.code = j.Cmd.ProcessState.ExitCode()
		if ws, ok := j.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			j.code = 128 + int(ws.Signal())
		}
		j.cond.Broadcast()
		j.mu.Unlock()
		close(j.exit)
	}()
	return j, nil
}

func (j *Job) read(r *os.File, done chan struct{}) {
	defer close(done)
	defer r.Close()
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		j.mu.Lock()
		j.out.WriteString(line + "\n")
		if m := startedRe.FindStringSubmatch(line); m != nil {
			rank, _ := strconv.Atoi(m[1])
			pid, _ := strconv.Atoi(m[2])
			j.pids[rank] = pid
		} else if m := stepRe.FindStringSubmatch(line); m != nil {
			rank, _ := strconv.Atoi(m[1])
			step, _ := strconv.Atoi(m[2])
			if s, ok := j.steps[rank]; !ok || step > s {
				j.steps[rank] = step
			}
		}
		j.cond.Broadcast()
		j.mu.Unlock()
	}
}

// waitFor blocks until cond (called with j.mu held) holds, the job exits or timeout passes.
func (j *Job) waitFor(timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() {
		j.mu.Lock()
		j.cond.Broadcast()
		j.mu.Unlock()
	})
	defer timer.Stop()
	j.mu.Lock()
	defer j.mu.Unlock()
	for !cond() {
		if j.done {
			return fmt.Errorf("wait for %s: %w (code %d)", what, ErrExited, j.code)
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("wait for %s: %w after %v", what, ErrTimeout, timeout)
		}
		j.cond.Wait()
	}
	return nil
}

// NProc returns the number of ranks the job was started with.
func (j *Job) nproc() int {
	for i, a := range j.Cmd.Args {
		if a == "--nproc" && i+1 < len(j.Cmd.Args) {
			n, _ := strconv.Atoi(j.Cmd.Args[i+1])
			return n
		}
	}
	return 4
}

// RankPIDs returns rank -> pid once every rank printed its started line.
func (j *Job) RankPIDs(timeout time.Duration) (map[int]int, error) {
	n := j.nproc()
	if err := j.waitFor(timeout, "ranks to start", func() bool { return len(j.pids) >= n }); err != nil {
		return nil, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	m := make(map[int]int, len(j.pids))
	for r, p := range j.pids {
		m[r] = p
	}
	return m, nil
}

// WaitStep waits until rank finished step (steps count from 0).
func (j *Job) WaitStep(rank, step int, timeout time.Duration) error {
	return j.waitFor(timeout, fmt.Sprintf("rank %d step %d", rank, step), func() bool {
		s, ok := j.steps[rank]
		return ok && s >= step
	})
}

// LastStep returns the last step rank finished, or -1.
func (j *Job) LastStep(rank int) int {
	j.mu.Lock()
	defer j.mu.Unlock()
	if s, ok := j.steps[rank]; ok {
		return s
	}
	return -1
}

// Exited reports whether the job's launcher has exited.
func (j *Job) Exited() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.done
}

// Wait waits for the launcher to exit and returns its exit code.
func (j *Job) Wait(timeout time.Duration) (int, error) {
	select {
	case <-j.exit:
	case <-time.After(timeout):
		return -1, fmt.Errorf("wait for job exit: %w after %v", ErrTimeout, timeout)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.code, nil
}

// Output returns the combined output so far.
func (j *Job) Output() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.out.String()
}

// Stop kills the whole process group, reaps it and removes the job's
// shared-memory segments and store. It is idempotent.
func (j *Job) Stop() {
	j.stop.Do(func() {
		pids, _ := j.ranksNow()
		pgid := j.Cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL) // in case a rank left the group
		}
		select {
		case <-j.exit:
		case <-time.After(10 * time.Second):
		}
		// ranks are children of the launcher: once it is gone init reaps them;
		// wait until they disappear so the segments are no longer used.
		for _, pid := range pids {
			for i := 0; i < 200 && alive(pid); i++ {
				time.Sleep(10 * time.Millisecond)
			}
		}
		RemoveSegments(j.segments())
		os.RemoveAll(j.store)
	})
}

func (j *Job) ranksNow() ([]int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var pids []int
	for _, p := range j.pids {
		pids = append(pids, p)
	}
	return pids, nil
}

// segments returns the shared-memory segment names of this job: the
// communicator named by the id rank 0 wrote into the store.
func (j *Job) segments() []string {
	raw, err := os.ReadFile(filepath.Join(j.store, "nccl_id"))
	if err != nil || len(raw) < 32 {
		return nil
	}
	id := strings.TrimSpace(string(raw))[:32]
	return []string{ShmPrefix + "cu-" + id, ShmPrefix + "mc-" + id}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && st.State != 'Z'
}

// RemoveSegments removes the named segments from /dev/shm, ignoring missing ones.
func RemoveSegments(names []string) {
	for _, n := range names {
		_ = os.Remove(filepath.Join("/dev/shm", n))
	}
}

// Segments lists the fake NCCL's segments currently in /dev/shm.
func Segments() ([]string, error) {
	m, err := filepath.Glob("/dev/shm/" + ShmPrefix + "*")
	if err != nil {
		return nil, fmt.Errorf("list segments: %w", err)
	}
	for i := range m {
		m[i] = filepath.Base(m[i])
	}
	return m, nil
}

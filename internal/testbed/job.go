package testbed

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/testutil"
)

// ErrTimeout is returned when a job does not reach a state in time.
var ErrTimeout = testutil.ErrTimeout

// ErrExited is returned when a job exited before reaching the awaited state.
var ErrExited = testutil.ErrExited

// JobOptions describe one run.py job.
type JobOptions struct {
	NProc, Steps int
	Vendor       string // "cuda" (default) or "maca"
	Fault        string // one of Faults, or empty
	FaultRank    int
	FaultStep    int
	// Workers is the number of data loader worker processes each rank
	// forks (run.py --workers); 0 leaves run.py's default: a loader
	// thread, or 2 workers with FaultDataloaderWorker.
	Workers int
	// LaunchBound, when positive, runs run.py's launch-bound mode: each
	// step is that many trivial launches and one synchronize, and each
	// rank ends with a launch-rate line (LaunchRate reads it).
	LaunchBound int
	// NNodes, when above 1, makes the job one node of NNodes (run.py
	// --nnodes, --node-rank NodeRank): its ranks are NodeRank*NProc on.
	// Every node needs the same Store.
	NNodes, NodeRank int
	// Store is the job's XPU_FAKEGPU_STORE, shared by the nodes of a
	// multi-node job (NewStore); "" makes one of its own.
	Store  string
	Python string   // interpreter, default python3
	Env    []string // extra environment
	Args   []string // extra run.py arguments (e.g. "--step-ms", "5")
}

func (o JobOptions) args(b *Bed) []string {
	a := []string{b.RunPy(), "--nproc", strconv.Itoa(orDefault(o.NProc, 4)), "--steps", strconv.Itoa(orDefault(o.Steps, 30)),
		"--lib-dir", b.Dir}
	if o.Vendor != "" {
		a = append(a, "--vendor", o.Vendor)
	}
	if o.Workers > 0 {
		a = append(a, "--workers", strconv.Itoa(o.Workers))
	}
	if o.LaunchBound > 0 {
		a = append(a, "--launch-bound", strconv.Itoa(o.LaunchBound))
	}
	if o.Fault != "" {
		a = append(a, "--fault", o.Fault, "--fault-rank", strconv.Itoa(o.FaultRank), "--fault-step", strconv.Itoa(o.FaultStep))
	}
	if o.NNodes > 1 {
		a = append(a, "--nnodes", strconv.Itoa(o.NNodes), "--node-rank", strconv.Itoa(o.NodeRank))
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

	g     *testutil.Group
	store string
	mu    sync.Mutex
	pids  map[int]int
	steps map[int]int // rank -> last step done
	stop  sync.Once
}

// Progress lines of run.py.
var (
	startedRe = regexp.MustCompile(`^xpu-fakegpu rank=(\d+) pid=(\d+) started$`)
	stepRe    = regexp.MustCompile(`^xpu-fakegpu rank=(\d+) step=(\d+) done$`)
)

// launchRateRe is the last line of a rank in launch-bound mode.
var launchRateRe = regexp.MustCompile(`^xpu-fakegpu rank=(\d+) launches=(\d+) seconds=[0-9.]+ launches_per_second=([0-9.]+)$`)

// LaunchRate reads a rank's launch-rate line (launch-bound mode): its
// rank, how many launches it made and how many per second.
func LaunchRate(line string) (rank, launches int, perSecond float64, ok bool) {
	m := launchRateRe.FindStringSubmatch(line)
	if m == nil {
		return 0, 0, 0, false
	}
	rank, _ = strconv.Atoi(m[1])
	launches, _ = strconv.Atoi(m[2])
	perSecond, _ = strconv.ParseFloat(m[3], 64)
	return rank, launches, perSecond, true
}

// Started reads a rank's "started" line: its rank and pid.
func Started(line string) (rank, pid int, ok bool) { return twoInts(startedRe, line) }

// StepDone reads a rank's "step done" line: its rank and the step.
func StepDone(line string) (rank, step int, ok bool) { return twoInts(stepRe, line) }

// twoInts reads the two numbers re captures in line.
func twoInts(re *regexp.Regexp, line string) (a, b int, ok bool) {
	m := re.FindStringSubmatch(line)
	if m == nil {
		return 0, 0, false
	}
	a, _ = strconv.Atoi(m[1])
	b, _ = strconv.Atoi(m[2])
	return a, b, true
}

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
	store := o.Store
	if store == "" {
		s, err := NewStore()
		if err != nil {
			return nil, err
		}
		store = s
	}
	o.Env = append(append([]string{}, o.Env...), "XPU_FAKEGPU_STORE="+store)
	j := &Job{Cmd: b.JobCommand(o), store: store, pids: map[int]int{}, steps: map[int]int{}}
	var err error
	j.g, err = testutil.StartGroup(j.Cmd, j.line)
	if err != nil {
		os.RemoveAll(store)
		return nil, err
	}
	return j, nil
}

// NewStore makes a store (XPU_FAKEGPU_STORE) for a job, or for the nodes
// of one; Stop removes it.
func NewStore() (string, error) {
	store, err := os.MkdirTemp("", "xpufake-store-")
	if err != nil {
		return "", fmt.Errorf("create store: %w", err)
	}
	return store, nil
}

// StartNodes starts the nnodes nodes of one job (o.NNodes and o.NodeRank
// set for each), sharing a store; t.Cleanup stops them.
func (b *Bed) StartNodes(t testing.TB, o JobOptions, nnodes int) []*Job {
	t.Helper()
	store, err := NewStore()
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*Job
	for i := range nnodes {
		n := o
		n.NNodes, n.NodeRank, n.Store = nnodes, i, store
		jobs = append(jobs, b.StartJob(t, n))
	}
	return jobs
}

// line records the ranks' progress.
func (j *Job) line(l testutil.Line) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if rank, pid, ok := Started(l.Text); ok {
		j.pids[rank] = pid
	} else if rank, step, ok := StepDone(l.Text); ok {
		if s, ok := j.steps[rank]; !ok || step > s {
			j.steps[rank] = step
		}
	}
}

// waitFor blocks until cond (called with j.mu held) holds, the job exits or timeout passes.
func (j *Job) waitFor(timeout time.Duration, what string, cond func() bool) error {
	err := j.g.Until(timeout, func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return cond()
	})
	if err != nil {
		return fmt.Errorf("wait for %s: %w", what, err)
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
	done, _ := j.g.Exited()
	return done
}

// Wait waits for the launcher to exit and returns its exit code.
func (j *Job) Wait(timeout time.Duration) (int, error) {
	select {
	case <-j.g.Done():
	case <-time.After(timeout):
		return -1, fmt.Errorf("wait for job exit: %w after %v", ErrTimeout, timeout)
	}
	_, code := j.g.Exited()
	return code, nil
}

// Output returns the combined output so far.
func (j *Job) Output() string { return j.g.Output() }

// Stop kills the whole process group, reaps it and removes the job's
// shared-memory segments and store. It is idempotent.
func (j *Job) Stop() {
	j.stop.Do(func() {
		pids, _ := j.ranksNow()
		j.g.Kill()
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL) // in case a rank left the group
		}
		select {
		case <-j.g.Done():
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

// segments returns the shared-memory segment names of this job.
func (j *Job) segments() []string { return StoreSegments(j.store) }

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	st, err := procfs.ReadStat(pid)
	return err == nil && st.State != 'Z'
}

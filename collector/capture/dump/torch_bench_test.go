package dump

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/native"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/benchtable"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
	"github.com/xpu-timer/xpu-timer/internal/version"
)

// torchPython is Debian's interpreter, the one python3-torch installs for.
const torchPython = "/usr/bin/python3"

// torchRounds is how many times each rank is dumped by each tool but gdb
// (once): every dump is a first one, by a new process or a new symbol
// cache, and one round was too few to tell 10 % on this noisy machine;
// a ratio on one rank is the median of one per round.
const torchRounds = 5

// torchRanks is how many ranks the job starts; the last one hangs.
const torchRanks = 4

// BenchmarkTorchJob measures a first dump of the processes of a hung
// PyTorch job (testdata/torchjob on Debian's torch 1.13: 4 DDP ranks on
// gloo, 3 blocked in an allreduce, 1 asleep in Python; the stripped 120 MB
// libtorch_cpu.so with its 9.9 MB .eh_frame mapped in each), and on each
// rank, one after the other:
//   - `xpu-timer-dump --pid` as a new process (cli): time, peak RSS, the
//     longest stop; and the same dump by the command users type,
//     `xpu-timer dump --pid` (cli-full: the full binary, which runs
//     xpu-timer-dump built beside it, cmd/internal/leandump), on each rank
//     too: native frames named from the symbol tables, as eu-stack's;
//   - `xpu-timer dump --lines --pid` (cli-lines): with source lines and
//     inlined frames from the debug information, as gdb's;
//   - a dump inside a running process, as the agent does it (agent, with
//     lines): a new symbol cache read ahead by Warm (untimed), then
//     Capture;
//   - elfutils' `eu-stack -p` (no Python frames, inlined frames or lines),
//     and `eu-stack -i -s -p`, with inlined frames and lines as
//     cli-lines;
//   - gdb's `thread apply all bt`.
//
// Every dump by a new process is a first one: the tools keep nothing
// between runs (no file is written, no daemon asked); what one run leaves
// for the next is the kernel's page cache, which serves every tool alike.
//
// Each figure is the median over the ranks and rounds, beside its anchor
// measured on the same processes in the same run. A tool that shows no
// frame fails the run. The targets (issue 18): cli at most eu-stack's
// time and 0.05 of gdb's; agent at most half of eu-stack's; cli's peak
// RSS at most 2 times eu-stack's; no thread stopped over 10 ms; and
// (issue 43) cli-full at most eu-stack's time on every rank.
func BenchmarkTorchJob(b *testing.B) {
	privileged.Root(b)
	need := func(name string) string {
		path, err := exec.LookPath(name)
		if err != nil {
			b.Fatalf("%s not installed (scripts/deps.sh installs it): %v", name, err)
		}
		return path
	}
	euStack, gdb := need("eu-stack"), need("gdb")
	need("/usr/bin/time")
	if out, err := exec.Command(torchPython, "-c", "import torch.distributed").CombinedOutput(); err != nil {
		b.Fatalf("%s cannot import torch (python3-torch): %v\n%s", torchPython, err, out)
	}
	dir := b.TempDir()
	for _, cmd := range []string{"xpu-timer", "xpu-timer-dump"} {
		if out, err := exec.Command("go", "build", "-tags", version.BuildTags, "-o", dir, "../../../cmd/"+cmd).CombinedOutput(); err != nil {
			b.Fatalf("build %s: %v\n%s", cmd, err, out)
		}
	}
	lean, full := []string{filepath.Join(dir, "xpu-timer-dump")}, []string{filepath.Join(dir, "xpu-timer"), "dump"}
	pids := startTorchJob(b)

	var cli, cliFull, cliLines, agent, eu, euLines, gd torchRuns
	// The new processes, ours and eu-stack's, side by side on the same
	// rank, in an order that turns from rank to rank.
	type newProcess struct {
		run  func(pid int) torchRun
		runs *torchRuns
	}
	newProcesses := []newProcess{
		{func(pid int) torchRun { return cliDump(b, lean, pid) }, &cli},
		{func(pid int) torchRun { return cliDump(b, full, pid) }, &cliFull},
		{func(pid int) torchRun { return cliDump(b, append(full, "--lines"), pid) }, &cliLines},
		{func(pid int) torchRun { return tool(b, "eu-stack", pid, euStack, "-p", strconv.Itoa(pid)) }, &eu},
		{func(pid int) torchRun {
			return tool(b, "eu-stack -i -s", pid, euStack, "-i", "-s", "-p", strconv.Itoa(pid))
		}, &euLines},
	}
	// Untimed, each once: whichever tool ran first would read the files
	// (libc's debug file, libtorch's tables) from disk for the others.
	for _, t := range newProcesses {
		t.run(pids[0])
	}
	var maxStop time.Duration
	b.ResetTimer()
	for range b.N {
		for round := range torchRounds {
			for i, pid := range pids {
				for j := range newProcesses {
					t := newProcesses[(round+i+j)%len(newProcesses)]
					r := t.run(pid)
					r.rank, r.round = i, round
					maxStop = max(maxStop, r.stop)
					t.runs.add(r)
				}
				r := agentDump(b, pid)
				maxStop = max(maxStop, r.stop)
				agent.add(r)
				if round == 0 { // 2-3 s each
					gd.add(tool(b, "gdb", pid, gdb, "-p", strconv.Itoa(pid), "-batch", "-nx", "-ex", "thread apply all bt"))
				}
			}
		}
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	mb := func(kb int64) float64 { return float64(kb) / 1024 }
	b.ReportMetric(ms(cli.time()), "cli-ms")
	b.ReportMetric(ms(cliFull.time()), "cli-full-ms")
	b.ReportMetric(ms(cliLines.time()), "cli-lines-ms")
	b.ReportMetric(mb(cliFull.rss()), "cli-full-rss-MB")
	b.ReportMetric(ms(agent.time()), "agent-ms")
	b.ReportMetric(ms(eu.time()), "eu-stack-ms")
	b.ReportMetric(ms(euLines.time()), "eu-stack-lines-ms")
	b.ReportMetric(ms(gd.time()), "gdb-ms")
	b.ReportMetric(ms(cli.cpuTime()), "cli-cpu-ms")
	b.ReportMetric(ms(eu.cpuTime()), "eu-stack-cpu-ms")
	b.ReportMetric(mb(cli.rss()), "cli-rss-MB")
	b.ReportMetric(mb(eu.rss()), "eu-stack-rss-MB")
	b.ReportMetric(mb(gd.rss()), "gdb-rss-MB")
	b.ReportMetric(ms(maxStop), "max-stop-ms")
	b.ReportMetric(cli.frames(), "cli-native-frames")
	b.ReportMetric(cliLines.frames(), "cli-lines-native-frames")
	b.ReportMetric(cli.pyFrames(), "cli-python-frames")
	b.ReportMetric(agent.frames(), "agent-native-frames")
	b.ReportMetric(eu.frames(), "eu-stack-frames")
	b.ReportMetric(gd.frames(), "gdb-frames")
	row := func(name string, fig, anchor float64, unit, what string) {
		benchtable.Row(b, "torch rank, "+name, fmt.Sprintf("%.1f %s", fig, unit), fmt.Sprintf("%.1f %s (%s)", anchor, unit, what), fig/anchor)
	}
	row("first dump, xpu-timer-dump (new process)", ms(cli.time()), ms(eu.time()), "ms", "eu-stack")
	row("first dump, xpu-timer-dump (new process)", ms(cli.time()), ms(gd.time()), "ms", "gdb")
	row("first dump, xpu-timer dump (new process)", ms(cliFull.time()), ms(eu.time()), "ms", "eu-stack")
	row("first dump, xpu-timer dump --lines (new process)", ms(cliLines.time()), ms(euLines.time()), "ms", "eu-stack -i -s: inlined frames and lines, as --lines")
	// The command users type, on each rank beside eu-stack on that rank
	// (ranks differ: rank 3 sleeps in clock_nanosleep, the others wait in
	// gloo), and with --lines beside eu-stack -i -s on that rank.
	for i := range pids {
		full, anchor := cliFull.rank(i), eu.rank(i)
		ratio := pairedRatio(full, anchor)
		b.ReportMetric(ms(full.time()), fmt.Sprintf("cli-full-rank%d-ms", i))
		b.ReportMetric(ms(anchor.time()), fmt.Sprintf("eu-stack-rank%d-ms", i))
		b.ReportMetric(ratio, fmt.Sprintf("cli-full-rank%d-ratio", i))
		benchtable.Row(b, fmt.Sprintf("torch rank %d, first dump, xpu-timer dump (new process), median of the ratios by round", i),
			fmt.Sprintf("%.1f ms", ms(full.time())), fmt.Sprintf("%.1f ms (eu-stack on that rank, same rounds)", ms(anchor.time())), ratio)
		lines, linesAnchor := cliLines.rank(i), euLines.rank(i)
		ratio = pairedRatio(lines, linesAnchor)
		b.ReportMetric(ratio, fmt.Sprintf("cli-lines-rank%d-ratio", i))
		benchtable.Row(b, fmt.Sprintf("torch rank %d, first dump, xpu-timer dump --lines (new process), median of the ratios by round", i),
			fmt.Sprintf("%.1f ms", ms(lines.time())), fmt.Sprintf("%.1f ms (eu-stack -i -s on that rank, same rounds)", ms(linesAnchor.time())), ratio)
	}
	row("first dump in the agent, after its read-ahead", ms(agent.time()), ms(eu.time()), "ms", "eu-stack")
	row("peak RSS, xpu-timer-dump", mb(cli.rss()), mb(eu.rss()), "MB", "eu-stack")
	row("peak RSS, xpu-timer dump", mb(cliFull.rss()), mb(eu.rss()), "MB", "eu-stack")
	row("longest stop", ms(maxStop), 10, "ms", "bound")
	b.Logf("per rank and round (ms): cli %v, cli-full %v, cli-lines %v, agent %v, eu-stack %v, eu-stack -i -s %v, gdb %v; stops (ms): cli %v, cli-full %v, cli-lines %v, agent %v",
		cli.times(), cliFull.times(), cliLines.times(), agent.times(), eu.times(), euLines.times(), gd.times(), cli.stops(), cliFull.stops(), cliLines.stops(), agent.stops())
}

// torchRun is one dump of one rank.
type torchRun struct {
	rank, round    int // in the job, of the benchmark
	took           time.Duration
	cpu            time.Duration // of a new process; 0 in-process
	rssKB          int64         // peak RSS of a new process; 0 in-process
	native, python int           // frames shown
	stop           time.Duration
}

type torchRuns []torchRun

func (rs *torchRuns) add(r torchRun) { *rs = append(*rs, r) }

// pairedRatio is the median, over the rounds, of a's time over b's in the
// same round (a and b of one rank): the two ran one after the other, so
// a load that comes and goes weighs on both.
func pairedRatio(a, b torchRuns) float64 {
	var rs []float64
	for _, x := range a {
		for _, y := range b {
			if x.round == y.round && y.took > 0 {
				rs = append(rs, float64(x.took)/float64(y.took))
			}
		}
	}
	return benchtable.Quantile(rs, 0.5)
}

// rank returns the runs on one rank.
func (rs torchRuns) rank(i int) torchRuns {
	var out torchRuns
	for _, r := range rs {
		if r.rank == i {
			out = append(out, r)
		}
	}
	return out
}

func medianOf[T int64 | time.Duration | int](rs torchRuns, f func(torchRun) T) T {
	v := make([]T, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func (rs torchRuns) time() time.Duration {
	return medianOf(rs, func(r torchRun) time.Duration { return r.took })
}
func (rs torchRuns) cpuTime() time.Duration {
	return medianOf(rs, func(r torchRun) time.Duration { return r.cpu })
}
func (rs torchRuns) rss() int64 { return medianOf(rs, func(r torchRun) int64 { return r.rssKB }) }
func (rs torchRuns) frames() float64 {
	return float64(medianOf(rs, func(r torchRun) int { return r.native }))
}
func (rs torchRuns) pyFrames() float64 {
	return float64(medianOf(rs, func(r torchRun) int { return r.python }))
}

func (rs torchRuns) times() []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = r.took.Milliseconds()
	}
	return out
}

func (rs torchRuns) stops() []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = float64(r.stop.Microseconds()) / 1000
	}
	return out
}

// frameLine is a frame of eu-stack's and gdb's output: "#3  0x...".
var frameLine = regexp.MustCompile(`(?m)^#\d+ `)

// tool runs a peer's command on pid and counts the frames it printed.
func tool(b *testing.B, name string, pid int, path string, args ...string) torchRun {
	b.Helper()
	out, took, cpu, rss, err := timed(path, args...)
	if err != nil {
		b.Fatalf("%s -p %d: %v\n%s", name, pid, err, out)
	}
	n := len(frameLine.FindAll(out, -1))
	if n == 0 {
		b.Fatalf("%s -p %d showed no frame:\n%s", name, pid, out)
	}
	return torchRun{took: took, cpu: cpu, rssKB: rss, native: n}
}

// timed runs a command under GNU time and returns its output, wall time,
// CPU time and peak RSS. The RSS is GNU time's: a child forked from a Go
// process starts from the parent's memory (vfork), and the kernel counts
// that as the child's peak.
func timed(path string, args ...string) (out []byte, took, cpu time.Duration, rssKB int64, err error) {
	f, err := os.CreateTemp("", "rss")
	if err != nil {
		return nil, 0, 0, 0, err
	}
	f.Close()
	defer os.Remove(f.Name())
	cmd := exec.Command("/usr/bin/time", append([]string{"-f", "%M", "-o", f.Name(), path}, args...)...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	begin := time.Now()
	err = cmd.Run()
	took = time.Since(begin)
	if cmd.ProcessState != nil {
		cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if b, rerr := os.ReadFile(f.Name()); rerr == nil {
		fs := strings.Fields(string(b))
		if len(fs) > 0 {
			rssKB, _ = strconv.ParseInt(fs[len(fs)-1], 10, 64)
		}
	}
	return buf.Bytes(), took, cpu, rssKB, err
}

// cliDump runs `xpu-timer dump --pid --json` on pid.
func cliDump(b *testing.B, cmd []string, pid int) torchRun {
	b.Helper()
	out, took, cpu, rss, err := timed(cmd[0], append(cmd[1:], "--pid", strconv.Itoa(pid), "--json")...)
	if err != nil {
		b.Fatalf("%s --pid %d: %v\n%s", strings.Join(cmd, " "), pid, err, out)
	}
	// The dump file's fields (docs/stacktrace-schema.md) that are counted.
	var f struct {
		PID        int            `json:"pid"`
		StoppedFor time.Duration  `json:"stopped_for_ns"`
		Threads    []stack.Thread `json:"threads"`
		Errors     []string       `json:"errors"`
	}
	if err := json.Unmarshal(out, &f); err != nil {
		b.Fatalf("%s --pid %d: %v\n%s", strings.Join(cmd, " "), pid, err, out)
	}
	r := counted(b, strings.Join(cmd, " "), &Process{PID: f.PID, StoppedFor: f.StoppedFor, Threads: f.Threads, Errors: f.Errors})
	r.took, r.cpu, r.rssKB = took, cpu, rss
	return r
}

// agentDump dumps pid in this process, as the agent does: a new symbol
// cache read ahead (untimed) when it began to follow the process, then
// the first dump.
func agentDump(b *testing.B, pid int) torchRun {
	b.Helper()
	u := native.NewUnwinder(nil)
	b.StopTimer()
	if err := Warm(u, pid); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	begin := time.Now()
	p, err := Capture(pid, Options{Unwinder: u})
	took := time.Since(begin)
	if err != nil {
		b.Fatal(err)
	}
	r := counted(b, "agent dump", p)
	r.took = took
	return r
}

// counted counts the frames of a dump, which must show native frames of
// every thread and Python frames, and no error.
func counted(b *testing.B, name string, p *Process) torchRun {
	b.Helper()
	r := torchRun{stop: p.StoppedFor}
	for _, th := range p.Threads {
		if len(th.Native) == 0 || th.Error != "" {
			b.Fatalf("%s %d: thread %d: %d native frames, error %q", name, p.PID, th.TID, len(th.Native), th.Error)
		}
		r.native += len(th.Native)
		r.python += len(th.Python)
	}
	if r.python == 0 || len(p.Errors) > 0 {
		b.Fatalf("%s %d: %d threads, no Python frame, errors %q", name, p.PID, len(p.Threads), p.Errors)
	}
	return r
}

// startTorchJob starts testdata/torchjob/job.py, its last rank asleep in
// Python at its third step, and returns the ranks' pids, by rank, once
// every thread of every rank sleeps: the others hung in the allreduce.
// The job is killed at cleanup.
// startedRE matches a rank's "started" line (testdata/torchjob/job.py).
var startedRE = regexp.MustCompile(`xpu-torchjob rank=(\d+) pid=(\d+) started`)

func startTorchJob(b *testing.B) []int {
	b.Helper()
	cmd := exec.Command(torchPython, "../../../testdata/torchjob/job.py", "--spawn", strconv.Itoa(torchRanks),
		"--fault", "sleep", "--fault-rank", strconv.Itoa(torchRanks-1), "--fault-step", "2", "--step-ms", "10")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var byRank [torchRanks]int
	started := 0
	var said []string
	timeout := time.After(10 * time.Minute) // 4 ranks importing torch on 2 loaded CPUs
	for started < torchRanks {
		select {
		case line, ok := <-lines:
			if !ok {
				b.Fatalf("job ended: %s", stderr.String())
			}
			said = append(said, line)
			// Anywhere in the line: a rank's line could once run into
			// another's.
			for _, m := range startedRE.FindAllStringSubmatch(line, -1) {
				rank, _ := strconv.Atoi(m[1])
				pid, _ := strconv.Atoi(m[2])
				if rank < 0 || rank >= torchRanks || byRank[rank] != 0 {
					b.Fatalf("the job said %q", line)
				}
				byRank[rank] = pid
				started++
			}
		case <-timeout:
			b.Fatalf("%d of %d ranks started; the job said %q\n%s", started, torchRanks, said, stderr.String())
		}
	}
	go func() {
		for range lines {
		}
	}()
	pids := byRank[:]
	for _, pid := range pids {
		waitSettled(b, pid)
	}
	return pids
}

// waitSettled waits until every thread of pid has slept for half a
// second: the rank reached its allreduce (or its sleep) and its helper
// threads went idle.
func waitSettled(b *testing.B, pid int) {
	b.Helper()
	since := time.Time{}
	for deadline := time.Now().Add(2 * time.Minute); ; {
		tids, _ := procfs.Tasks(pid)
		asleep := len(tids) > 0
		for _, tid := range tids {
			if st, err := procfs.ReadTaskStat(pid, tid); err != nil || st.State != 'S' {
				asleep = false
			}
		}
		switch {
		case !asleep:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) > 500*time.Millisecond:
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("rank %d: threads still running: %v", pid, strings.TrimSpace(fmt.Sprint(tids)))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

package viewer

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/benchtable"
	"github.com/xpu-timer/xpu-timer/timeline"
)

// Benchmark size: the 4,096 ranks × 32 threads × 40 frames.
const (
	benchRanks   = 4096
	benchThreads = 32
	benchFrames  = 40
)

// benchFile is rank's dump in a big job: 32 threads of 40 native frames,
// the first also running Python. Stacks repeat across ranks as they do in
// a real hang (a few variants per thread, one rank in 64 with its own),
// so the trie grows as it would, not as a random forest.
func benchFile(rank int) *dumpfile.File {
	rng := rand.New(rand.NewPCG(uint64(rank), 7))
	f := &dumpfile.File{
		Rank: rank, WorldSize: benchRanks, LocalRank: rank % 8, LocalWorldSize: 8, Host: fmt.Sprintf("node-%04d", rank/8),
		PID: 1000 + rank, State: "S (sleeping)", Reason: "hang", DumpedAt: time.Unix(1.8e9, 0).UTC(),
		Comms: []dumpfile.CommState{{ID: worldComm, Rank: int32(rank), NRanks: benchRanks, Issued: lastSeq, Completed: lastSeq - 1, LastOp: "AllReduce"}},
	}
	if rank == 1234 {
		f.Comms[0].Issued = lastSeq - 1
	}
	for t := range benchThreads {
		variant := rng.IntN(3)
		if rank%64 == 63 {
			variant = 3 + rank // a stack of its own
		}
		var nat []stack.Frame
		for d := range benchFrames {
			fr := stack.Frame{Addr: 0x7f0000000000 + uint64(d)<<12}
			switch {
			case d < 6:
				fr.Func, fr.Module = fmt.Sprintf("runtime_entry_%d", d), libc
			case d < 24:
				fr.Func, fr.Module = fmt.Sprintf("c10d::ProcessGroupNCCL::worker_%d_%d(std::shared_ptr<c10d::Work>)", t%8, d), "/usr/lib/python3/site-packages/torch/lib/libtorch_cuda.so"
			default:
				fr.Func, fr.Module = fmt.Sprintf("ncclProxyProgress_%d_%d_v%d", t, d, variant), "/usr/lib/x86_64-linux-gnu/libnccl.so.2"
				fr.File, fr.Line = "src/proxy.cc", 100+d
			}
			nat = append(nat, fr)
		}
		th := stack.Thread{TID: 1000 + rank*100 + t, Name: fmt.Sprintf("pt_worker_%d", t%8), State: "S", Native: reverse(nat)}
		if t == 0 {
			var pyf []stack.Frame
			for d := range 12 {
				pyf = append(pyf, stack.Frame{Func: fmt.Sprintf("layer_%d", d), File: "/job/model.py", Line: 10 + d + variant%3, Module: "python"})
			}
			th.Python = reverse(pyf)
			th.Merged = reverse(append(append(nat[:20:20], pyf...), nat[28:]...))
		}
		f.Threads = append(f.Threads, th)
	}
	return f
}

func reverse(s []stack.Frame) []stack.Frame {
	out := make([]stack.Frame, len(s))
	for i, f := range s {
		out[len(s)-1-i] = f
	}
	return out
}

// writeBench writes the benchmark's dumps with dumpfile.Write, on every CPU.
func writeBench(b *testing.B, dir string) {
	onEveryCPU(b, benchRanks, func(r int) error {
		_, err := dumpfile.Write(dir, benchFile(r))
		return err
	})
}

// onEveryCPU calls fn(0..n-1) on every CPU and fails tb with the first
// error.
func onEveryCPU(tb testing.TB, n int, fn func(i int) error) {
	tb.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 1)
	next := make(chan int)
	for range runtime.GOMAXPROCS(0) {
		wg.Go(func() {
			for i := range next {
				if err := fn(i); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		tb.Fatal(err)
	default:
	}
}

// TestBenchChild is the viewer run the benchmark measures in a process of
// its own, so its peak RSS is the viewer's alone.
func TestBenchChild(t *testing.T) {
	dir := os.Getenv("XPU_TIMER_BENCH_DIR")
	if dir == "" {
		t.Skip("run by BenchmarkViewer")
	}
	res, err := Run(Options{Dir: dir, Out: filepath.Join(dir, "out")})
	if err != nil {
		t.Fatal(err)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("bench-child files=%d heap-sys=%d\n", res.Files, ms.HeapSys)
}

// runChild runs the viewer on dir in a process of its own (TestBenchChild)
// and returns its wall seconds and peak RSS in bytes.
func runChild(b *testing.B, dir string) (float64, int64) {
	secs, _, rss := runChildCPU(b, dir)
	return secs, rss
}

// runChildCPU is runChild that also returns the child's CPU seconds (user
// and system): on a shared machine, what load does not inflate.
func runChildCPU(b *testing.B, dir string) (float64, float64, int64) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestBenchChild$", "-test.v", "-test.timeout=30m")
	cmd.Env = append(os.Environ(), "XPU_TIMER_BENCH_DIR="+dir)
	t0 := time.Now()
	out, err := cmd.CombinedOutput()
	secs := time.Since(t0).Seconds()
	if err != nil {
		b.Fatalf("viewer run: %v\n%s", err, out)
	}
	cpu := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	return secs, cpu, cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
}

// BenchmarkViewerScale merges the real H100 dumps (testdata/gpu, 4 ranks,
// one hung in a kernel) replicated to 16,384 and to 100,000 ranks, each in
// a child process, and reports the 100,000-rank run's seconds and peak RSS
// beside the 16,384-rank run's and beside the targets (2 minutes, 4 GiB).
// The dumps are written first (about 12 KB a rank, 1.2 GB at 100,000),
// in a temporary directory, or in XPU_TIMER_BENCH_SCALE_DATA, kept.
func BenchmarkViewerScale(b *testing.B) {
	root := os.Getenv("XPU_TIMER_BENCH_SCALE_DATA")
	if root == "" {
		root = b.TempDir()
	}
	sizes := []int{16384, 100000}
	dirs := make([]string, len(sizes))
	for i, world := range sizes {
		dirs[i] = filepath.Join(root, fmt.Sprint(world))
		if _, err := os.Stat(filepath.Join(dirs[i], dumpfile.Name(world-1, world))); err == nil {
			continue
		}
		if err := os.MkdirAll(dirs[i], 0o755); err != nil {
			b.Fatal(err)
		}
		t0 := time.Now()
		replicate(b, realGloo, dirs[i], world)
		b.Logf("replicated %s to %d ranks in %s", realGloo, world, time.Since(t0).Round(time.Millisecond))
	}
	b.ResetTimer()
	secs := make([]float64, len(sizes))
	cpu := make([]float64, len(sizes))
	rss := make([]int64, len(sizes))
	for range b.N {
		for i := range sizes {
			secs[i], cpu[i], rss[i] = runChildCPU(b, dirs[i])
		}
	}
	b.StopTimer()
	if secs[0] == 0 || secs[1] == 0 || rss[0] == 0 || rss[1] == 0 {
		b.Fatal("a viewer run measured nothing")
	}
	b.ReportMetric(secs[0], "seconds-16k")
	b.ReportMetric(secs[1], "seconds-100k")
	b.ReportMetric(cpu[0], "cpu-seconds-16k")
	b.ReportMetric(cpu[1], "cpu-seconds-100k")
	b.ReportMetric(float64(rss[0])/(1<<20), "peak-RSS-MiB-16k")
	b.ReportMetric(float64(rss[1])/(1<<20), "peak-RSS-MiB-100k")
	benchtable.Row(b, "viewer, real dumps x 100,000 ranks", fmt.Sprintf("%.1f s", secs[1]), fmt.Sprintf("%.1f s (16,384 ranks)", secs[0]), secs[1]/secs[0])
	benchtable.Row(b, "viewer, real dumps x 100,000 ranks", fmt.Sprintf("%.1f s", secs[1]), "120 s (target)", secs[1]/120)
	benchtable.Row(b, "viewer CPU, real dumps x 100,000 ranks", fmt.Sprintf("%.1f s", cpu[1]), fmt.Sprintf("%.1f s (16,384 ranks)", cpu[0]), cpu[1]/cpu[0])
	benchtable.Row(b, "viewer peak RSS, 100,000 ranks", fmt.Sprintf("%d MiB", rss[1]>>20), fmt.Sprintf("%d MiB (16,384 ranks)", rss[0]>>20), float64(rss[1])/float64(rss[0]))
	benchtable.Row(b, "viewer peak RSS, 100,000 ranks", fmt.Sprintf("%d MiB", rss[1]>>20), "4096 MiB (target)", float64(rss[1]>>20)/4096)
}

// BenchmarkViewer times a whole viewer run (read, merge, every output) on
// 4,096 ranks × 32 threads × 40 frames, in a child process, and reports its
// seconds and peak RSS (targets: 5 s, 2 GiB). With FLAMEGRAPH_PL naming
// Brendan Gregg's flamegraph.pl it also times that on the same folded
// input (cpp_stack) and reports the ratio: no Debian package ships it,
// so `make bench` leaves it out unless it is named.
func BenchmarkViewer(b *testing.B) {
	// XPU_TIMER_BENCH_DATA keeps the generated dumps between runs (for
	// profiling the child: go test -run TestBenchChild -cpuprofile ...).
	dir := os.Getenv("XPU_TIMER_BENCH_DATA")
	if dir == "" {
		dir = b.TempDir()
	}
	start := time.Now()
	if _, err := os.Stat(filepath.Join(dir, dumpfile.Name(benchRanks-1, benchRanks))); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		writeBench(b, dir)
	}
	var size int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if filepath.Ext(e.Name()) == dumpfile.Ext {
			if st, err := e.Info(); err == nil {
				size += st.Size()
			}
		}
	}
	b.Logf("generated %d ranks × %d threads × %d frames (%d MiB of dumps) in %s", benchRanks, benchThreads, benchFrames, size>>20, time.Since(start).Round(time.Millisecond))
	b.ResetTimer()
	var secs float64
	var rss int64
	for range b.N {
		secs, rss = runChild(b, dir)
	}
	b.StopTimer()
	b.ReportMetric(secs, "seconds")
	b.ReportMetric(float64(rss)/(1<<20), "peak-RSS-MiB")
	b.ReportMetric(float64(size)/(1<<20), "input-MiB")
	if secs == 0 || rss == 0 {
		b.Fatal("the viewer run measured nothing")
	}
	benchtable.Row(b, "viewer, 4,096 ranks x 32 threads x 40 frames", fmt.Sprintf("%.2f s", secs), "5 s (target)", secs/5)
	benchtable.Row(b, "viewer peak RSS, the same", fmt.Sprintf("%d MiB", rss>>20), "2048 MiB (target)", float64(rss>>20)/2048)
	if pl := os.Getenv("FLAMEGRAPH_PL"); pl != "" {
		out, err := os.Create(filepath.Join(dir, "flamegraph.pl.svg"))
		if err != nil {
			b.Fatal(err)
		}
		defer out.Close()
		cmd := exec.Command("perl", pl, filepath.Join(dir, "out", timeline.CppFolded))
		cmd.Stdout = out
		t0 := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatalf("flamegraph.pl: %v", err)
		}
		fs := time.Since(t0).Seconds()
		b.ReportMetric(fs, "flamegraph.pl-seconds")
		b.ReportMetric(fs/secs, "flamegraph.pl/viewer")
		benchtable.Row(b, "viewer vs flamegraph.pl on its folded output", fmt.Sprintf("%.2f s", secs), fmt.Sprintf("%.2f s (flamegraph.pl)", fs), secs/fs)
	}
}

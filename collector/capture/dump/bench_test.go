package dump

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/collector/capture/native"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

// The benchmark's target: benchThreads threads, all but the main one
// blocked at the end of a chain of calls through benchChain of benchLibs
// shared libraries it dlopens, so that every library is on some stack.
// The libraries are copies of one, each with its own build-id: distinct
// files to every tool, built in a fraction of a second.
const (
	benchLibs    = 160
	benchThreads = 32
	benchChain   = 6
)

const benchLibSource = `typedef int (*step)(void *const *next, int d);
__attribute__((noinline)) int fake(void *const *next, int d) {
	int r = ((step)next[0])(next + 1, d + 1);
	__asm__ volatile("" ::: "memory");
	return r + 1;
}
`

const benchMainSource = `#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define NLIB %d
#define NTHREAD %d
#define CHAIN %d

static void *libs[NLIB];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t ready;
static volatile int never;
static void *chains[NTHREAD][CHAIN + 1];

__attribute__((noinline)) int block(void *const *next, int d) {
	(void)next;
	pthread_barrier_wait(&ready);
	pthread_mutex_lock(&mu);
	while (!never)
		pthread_cond_wait(&cond, &mu);
	pthread_mutex_unlock(&mu);
	return d;
}

static void *run(void *arg) {
	void **c = chains[(long)arg];
	return (void *)(long)((int (*)(void *const *, int))c[0])(c + 1, 0);
}

int main(int argc, char **argv) {
	char path[4096];
	for (int i = 0; i < NLIB; i++) {
		snprintf(path, sizeof path, "%%s/libfake%%d.so", argv[1], i);
		void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!h || !(libs[i] = dlsym(h, "fake"))) {
			fprintf(stderr, "%%s: %%s\n", path, dlerror());
			return 1;
		}
	}
	pthread_barrier_init(&ready, NULL, NTHREAD);
	pthread_t t;
	for (long i = 0; i < NTHREAD - 1; i++) {
		for (int k = 0; k < CHAIN; k++)
			chains[i][k] = libs[(i * CHAIN + k) %% NLIB];
		chains[i][CHAIN] = (void *)block;
		pthread_create(&t, NULL, run, (void *)i);
	}
	pthread_barrier_wait(&ready);
	printf("ready %%d\n", (int)getpid());
	fflush(stdout);
	for (;;)
		pause();
}
`

// buildBenchTarget builds the program and its libraries in dir.
func buildBenchTarget(b *testing.B, dir string) string {
	b.Helper()
	gcc := func(args ...string) {
		cmd := exec.Command("gcc", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	src := fmt.Sprintf(benchMainSource, benchLibs, benchThreads, benchChain)
	for name, text := range map[string]string{"fake.c": benchLibSource, "target.c": src} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	gcc("-O2", "-g", "-fPIC", "-shared", "-Wl,--build-id", "-o", "fake.so", "fake.c")
	gcc("-O2", "-g", "-pthread", "-o", "target", "target.c", "-ldl")
	lib, err := os.ReadFile(filepath.Join(dir, "fake.so"))
	if err != nil {
		b.Fatal(err)
	}
	f, err := elf.Open(filepath.Join(dir, "fake.so"))
	if err != nil {
		b.Fatal(err)
	}
	note := f.Section(".note.gnu.build-id")
	f.Close()
	if note == nil || note.Size < 16+8 {
		b.Fatal("fake.so has no build-id")
	}
	// The note: namesz, descsz, type, "GNU\0", then the id.
	id := lib[note.Offset+16 : note.Offset+16+8]
	for i := 0; i < benchLibs; i++ {
		binary.LittleEndian.PutUint64(id, uint64(i)+0x9e3779b97f4a7c15)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("libfake%d.so", i)), lib, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	return filepath.Join(dir, "target")
}

// startBenchTarget runs bin as a grandchild (through sh), as the agent
// sees a training process: not a child of ours. It returns bin's pid.
func startBenchTarget(b *testing.B, bin string) int {
	b.Helper()
	cmd := exec.Command("sh", "-c", `"$0" "$1" & wait`, bin, filepath.Dir(bin))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	var pid int
	b.Cleanup(func() {
		// sh reaps the target, then ends.
		if pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		stdin.Close()
		done := make(chan struct{})
		go func() {
			cmd.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			b.Errorf("target %d was not reaped after SIGKILL", pid)
			cmd.Process.Kill()
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if _, serr := fmt.Sscanf(line, "ready %d", &pid); serr != nil {
		b.Fatalf("target said %q: %v", line, err)
	}
	// All threads asleep: every worker waits on the condition variable.
	waitAsleep(b, "target", pid, benchThreads)
	return pid
}

// benchRuns is how many times each dump is timed.
const benchRuns = 5

// median runs f benchRuns times and returns its median time.
func median(f func() time.Duration) time.Duration {
	ds := make([]time.Duration, benchRuns)
	for i := range ds {
		ds[i] = f()
	}
	slices.Sort(ds)
	return ds[benchRuns/2]
}

// BenchmarkDump dumps a process of 32 threads and 160+ shared libraries
// with a cold symbol cache, again with the cache warm, with a new cache
// read ahead by Cache.Warm (as the agent does), and with gdb's
// `thread apply all bt`, and reports each time, the ratios to gdb (the
// goal is 0.1 or less) and the longest time any dump kept the target
// stopped.
func BenchmarkDump(b *testing.B) {
	privileged.Root(b)
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		b.Skipf("gdb not installed: %v", err)
	}
	pid := startBenchTarget(b, buildBenchTarget(b, b.TempDir()))
	if maps, err := procfs.Maps(pid); err == nil {
		libs := map[string]bool{}
		for _, m := range maps {
			if strings.HasSuffix(m.Path, ".so") || strings.Contains(m.Path, ".so.") {
				libs[m.Path] = true
			}
		}
		if len(libs) < 150 {
			b.Fatalf("target maps %d shared libraries, want 150 or more", len(libs))
		}
	}

	var cold, warmed, cached, gdbTime, maxStop time.Duration
	check := func(p *Process) {
		if len(p.Threads) != benchThreads || len(p.Errors) > 0 {
			b.Fatalf("dump: %d threads, errors %q", len(p.Threads), p.Errors)
		}
		chains := 0
		for _, th := range p.Threads {
			fakes := 0
			for _, f := range th.Native {
				if f.Func == "fake" && strings.Contains(f.Module, "libfake") {
					fakes++
				}
			}
			if fakes == benchChain {
				chains++
			}
		}
		if chains != benchThreads-1 {
			b.Fatalf("%d threads show their chain of %d library calls, want %d", chains, benchChain, benchThreads-1)
		}
		maxStop = max(maxStop, p.StoppedFor)
	}
	// Each time is the median of benchRuns, against the noise of a shared
	// machine: every cold dump with a new unwinder (an empty cache), the
	// cached ones with the last.
	capture := func(u *native.Unwinder) time.Duration {
		begin := time.Now()
		p, err := Capture(pid, Options{Unwinder: u, NoPython: true, Lines: true}) // as gdb and the agent
		d := time.Since(begin)
		if err != nil {
			b.Fatal(err)
		}
		check(p)
		return d
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		var u *native.Unwinder
		cold += median(func() time.Duration {
			u = native.NewUnwinder(nil)
			return capture(u)
		})
		cached += median(func() time.Duration { return capture(u) })
		// The agent's path: the cache warmed (untimed) when it began to
		// follow the process, then the first dump.
		warmed += median(func() time.Duration {
			u = native.NewUnwinder(nil)
			b.StopTimer()
			if err := u.Cache().Warm(pid); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			return capture(u)
		})
		gdbTime += median(func() time.Duration {
			begin := time.Now()
			out, err := exec.Command(gdb, "-p", strconv.Itoa(pid), "-batch", "-nx", "-ex", "thread apply all bt").CombinedOutput()
			d := time.Since(begin)
			if err != nil {
				b.Fatalf("gdb: %v\n%s", err, out)
			}
			if n := strings.Count(string(out), "\nThread "); n != benchThreads {
				b.Fatalf("gdb shows %d threads, want %d", n, benchThreads)
			}
			return d
		})
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(b.N) }
	b.ReportMetric(ms(cold), "cold-ms")
	b.ReportMetric(ms(cached), "cached-ms")
	b.ReportMetric(ms(warmed), "warmed-ms")
	b.ReportMetric(ms(gdbTime), "gdb-ms")
	b.ReportMetric(float64(cold)/float64(gdbTime), "cold/gdb")
	b.ReportMetric(float64(cached)/float64(gdbTime), "cached/gdb")
	b.ReportMetric(float64(warmed)/float64(gdbTime), "warmed/gdb")
	b.ReportMetric(float64(maxStop)/float64(time.Millisecond), "max-stop-ms")
}

//go:build linux && (386 || amd64)

package ebpf

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/testbed"
	"github.com/xpu-timer/xpu-timer/timer"
)

// launchNames counts the launches of one process a Tracer delivers, by
// kernel name ("" for a handle nothing named), and when each name came
// last.
type launchNames struct {
	pid  int
	mu   sync.Mutex
	n    map[string]int
	last map[string]time.Time
}

func countLaunches(t *testing.T, tr *Tracer) *launchNames {
	t.Helper()
	c := &launchNames{n: map[string]int{}, last: map[string]time.Time{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- tr.Run(ctx, func(evs []timer.Event) {
			c.mu.Lock()
			defer c.mu.Unlock()
			for _, ev := range evs {
				if ev.Kind == timer.KindLaunch && ev.PID == c.pid {
					c.n[ev.Kernel]++
					c.last[ev.Kernel] = time.Now()
				}
			}
		}, nil)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Run: %v", err)
		}
	})
	<-tr.Ready()
	return c
}

func (c *launchNames) get(name string) (int, time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name], c.last[name]
}

// waitLookups waits until the lookups' probes are attached (want) or not,
// for at most d.
func waitLookups(t *testing.T, tr *Tracer, want bool, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for (tr.Stats().LookupProbes > 0) != want {
		if time.Now().After(deadline) {
			t.Fatalf("lookup probes attached %v after %v, want %v: %+v", !want, d, want, tr.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// followedStep starts the testbed's trainstep with args, followed from
// its start by a new tracer whose launches c counts by kernel, and lets it
// run; creating the file late brings a kernel never launched before.
func followedStep(t *testing.T, args string) (tr *Tracer, c *launchNames, p *proc, late string) {
	t.Helper()
	privileged.Root(t)
	bed := testbed.Build(t)
	late = filepath.Join(t.TempDir(), "late")
	tr = newTracer(t, Options{})
	c = countLaunches(t, tr)
	p = startEnv(t, []string{"LATE_FILE=" + late}, "/bin/sh", "-c", `read x; exec "$0" `+args, bed.Bin("trainstep"))
	c.pid = p.pid()
	if err := tr.Follow(p.pid()); err != nil {
		t.Fatal(err)
	}
	p.send(t, "go")
	return tr, c, p, late
}

// Followed from its start, a training step whose library looks its
// kernels' CUfunctions up before each launch (cuBLASLt) has every launch
// named, and the lookups' probes go once nothing new comes; a kernel
// never launched before brings them back until its lookup names it, and
// they go again.
func TestKernelLookupsOnDemand(t *testing.T) {
	tr, c, p, late := followedStep(t, "--runtime 20 --driver 5 --lt 6 --attrs 3 --copies 2 --block 50 --pause-us 2000")
	waitLookups(t, tr, true, 10*time.Second) // attached with the driver
	p.until(t, "warm")
	// Quiet once the step's kernels are all named: within a window of the
	// last news (a second or so of start-up), and then for good.
	waitLookups(t, tr, false, 4*lookupWindow)
	quietAt := time.Now()
	time.Sleep(lookupWindow + time.Second)
	if n := tr.Stats().LookupProbes; n != 0 {
		t.Fatalf("the lookups' probes came back (%d) with nothing new", n)
	}
	if n, last := c.get(""); n > 0 {
		t.Errorf("%d launches unnamed, the last at %v (quiet since %v)", n, last, quietAt)
	}
	if n, _ := c.get("gemm_bf16_kernel"); n == 0 {
		t.Error("no launch named gemm_bf16_kernel")
	}
	gemm, _ := c.get("gemm_bf16_kernel")
	time.Sleep(500 * time.Millisecond)
	if again, _ := c.get("gemm_bf16_kernel"); again <= gemm {
		t.Error("no launch named gemm_bf16_kernel while the lookups' probes are away")
	}

	// A new kernel, launched through a CUfunction nothing named yet.
	if err := os.WriteFile(late, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitLookups(t, tr, true, 5*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for n, _ := c.get("triton_red_fused_sum_1"); n == 0; n, _ = c.get("triton_red_fused_sum_1") {
		if time.Now().After(deadline) {
			t.Fatalf("the new kernel's launches are not named: %+v", tr.Stats())
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitLookups(t, tr, false, 4*lookupWindow)
	unnamed, _ := c.get("")
	if unnamed == 0 {
		t.Error("no launch of the new kernel before it was named: the probes were not away")
	}
	time.Sleep(time.Second)
	if n, _ := c.get(""); n != unnamed {
		t.Errorf("%d more unnamed launches after the new kernel was named", n-unnamed)
	}
	t.Logf("%d launches of the new kernel before its name was learned", unnamed)
}

// A new kernel of a step longer than the lookups' window (3 s a step
// here) is named all the same: its handle stays pending, and the probes
// with it, until its next launch, whose lookup names it.
func TestKernelLookupsSlowStep(t *testing.T) {
	tr, c, _, late := followedStep(t, "--runtime 20 --driver 5 --lt 1 --attrs 0 --copies 0 --block 1 --pause-us 2000")
	waitLookups(t, tr, true, 10*time.Second)
	waitLookups(t, tr, false, 4*lookupWindow)
	if err := os.WriteFile(late, []byte("3000000"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitLookups(t, tr, true, 5*time.Second)
	deadline := time.Now().Add(15 * time.Second)
	for n, _ := c.get("triton_red_fused_sum_1"); n == 0; n, _ = c.get("triton_red_fused_sum_1") {
		if time.Now().After(deadline) {
			t.Fatalf("the new kernel's launches, 3 s apart, are not named: %+v", tr.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, _ := c.get(""); n != 1 {
		t.Errorf("%d launches unnamed, want the new kernel's first", n)
	}
	waitLookups(t, tr, false, 4*lookupWindow)
}

// Followed late (watch --pid), the runtime's kernels were looked up
// before the probes: their handles stay unnamed, and the lookups' probes
// go after one window all the same, and stay away.
func TestKernelLookupsLateAttach(t *testing.T) {
	privileged.Root(t)
	bed := testbed.Build(t)
	p := start(t, bed.Bin("trainstep"), "--runtime", "20", "--driver", "5", "--lt", "6", "--attrs", "3", "--copies", "2",
		"--block", "50", "--pause-us", "2000")
	p.until(t, "warm")
	tr := newTracer(t, Options{})
	c := countLaunches(t, tr)
	c.pid = p.pid()
	if err := tr.Follow(p.pid()); err != nil {
		t.Fatal(err)
	}
	waitLookups(t, tr, true, 5*time.Second)
	waitLookups(t, tr, false, 4*lookupWindow)
	time.Sleep(lookupWindow + time.Second)
	if n := tr.Stats().LookupProbes; n != 0 {
		t.Fatalf("the lookups' probes came back (%d): a handle that stays unnamed keeps them", n)
	}
	if n, _ := c.get(""); n == 0 {
		t.Error("no unnamed launch: the kernels' lookups came after the attach?")
	}
}

// What the parts a user turns off take away: without kernel names a
// launch through the driver keeps its handle (no name, and no lookup
// probed); without copy and event probes no copy, event record, stream
// wait or event query is recorded, while launches and synchronizes are.
func TestPartsOff(t *testing.T) {
	privileged.Root(t)
	bed := testbed.Build(t)
	for _, c := range []struct {
		name string
		opts Options
	}{{"no kernel names", Options{NoKernelNames: true}}, {"no copy and event probes", Options{NoCopyEventProbes: true}}} {
		t.Run(c.name, func(t *testing.T) {
			tr := newTracer(t, c.opts)
			rec := record(t, tr)
			p := start(t, "/bin/sh", "-c", `read x; exec "$0" --runtime 20 --driver 5 --lt 6 --attrs 3 --copies 2 --block 10 --blocks 3 --warm 0`,
				bed.Bin("trainstep"))
			if err := tr.Follow(p.pid()); err != nil {
				t.Fatal(err)
			}
			p.send(t, "go")
			rec.waitFor(t, "the exit", func(evs []timer.Event, _ []Notice) bool {
				return hasEvent(evs, p.pid(), timer.KindProcessExit)
			})
			kinds := map[timer.Kind]int{}
			named := 0
			for _, ev := range rec.of(p.pid()) {
				kinds[ev.Kind]++
				if ev.Kind == timer.KindLaunch && ev.Kernel != "" {
					named++
				}
			}
			const steps, launches = 30, 31 // 20 + 5 + 6 a step
			if kinds[timer.KindLaunch] != steps*launches || kinds[timer.KindStreamSynchronize] != 2*steps {
				t.Errorf("%d launches and %d synchronize records for %d steps, want %d and %d", kinds[timer.KindLaunch],
					kinds[timer.KindStreamSynchronize], steps, steps*launches, 2*steps)
			}
			if c.opts.NoKernelNames {
				if named != 0 || tr.Stats().LookupProbes != 0 {
					t.Errorf("%d launches named, %d lookup probes, without kernel names", named, tr.Stats().LookupProbes)
				}
				if kinds[timer.KindMemcpyAsync] != 2*steps || kinds[timer.KindEventRecord] != 2*steps {
					t.Errorf("copies %d, records %d: want them all", kinds[timer.KindMemcpyAsync], kinds[timer.KindEventRecord])
				}
				return
			}
			if named != steps*launches {
				t.Errorf("%d of %d launches named", named, steps*launches)
			}
			for _, k := range []timer.Kind{timer.KindMemcpyAsync, timer.KindEventRecord, timer.KindStreamWaitEvent, timer.KindEventQuery} {
				if kinds[k] != 0 {
					t.Errorf("%d %s records without copy and event probes", kinds[k], k)
				}
			}
		})
	}
}

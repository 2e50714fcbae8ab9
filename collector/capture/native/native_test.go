//go:build linux && amd64

package native

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/privileged"
	"github.com/xpu-timer/xpu-timer/internal/procfs"
)

func osMkdirTemp() (string, error) { return os.MkdirTemp("", "xpu-native-") }

func names(fs []stack.Frame) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = normalize(f.Func)
	}
	return out
}

// compareGDB lists every difference between our threads and gdb's: a
// thread only one side has, the number of frames, a function name, or a pc
// that gdb printed. The innermost pc of a running thread moves between the
// two captures and is left out.
func compareGDB(ours []stack.Thread, gdb map[int][]frameLine) []string {
	return compareStacks(ours, gdb, nil)
}

// compareStacks is compareGDB against another tool's stacks; alias, when
// not nil, says whether a name of ours that differs from the tool's names
// the same function (another symbol at the same address).
func compareStacks(ours []stack.Thread, gdb map[int][]frameLine, alias func(f stack.Frame, name string) bool) []string {
	var diffs []string
	seen := map[int]bool{}
	for _, th := range ours {
		seen[th.TID] = true
		want, ok := gdb[th.TID]
		if !ok {
			diffs = append(diffs, fmt.Sprintf("thread %d: not in gdb's output", th.TID))
			continue
		}
		got := names(th.Native)
		var wantNames []string
		for _, f := range want {
			wantNames = append(wantNames, f.name)
		}
		show := func() string {
			return fmt.Sprintf("\n ours: %s\n  gdb: %s", strings.Join(got, " <- "), strings.Join(wantNames, " <- "))
		}
		if th.Error != "" {
			diffs = append(diffs, fmt.Sprintf("thread %d: error %q", th.TID, th.Error))
		}
		if len(got) != len(want) {
			diffs = append(diffs, fmt.Sprintf("thread %d: %d frames, gdb %d%s", th.TID, len(got), len(want), show()))
			continue
		}
		running := th.State == "R"
		for i, f := range want {
			if got[i] != f.name && (alias == nil || !alias(th.Native[i], f.name)) {
				diffs = append(diffs, fmt.Sprintf("thread %d frame #%d: %q, gdb %q%s", th.TID, i, got[i], f.name, show()))
			}
			if f.pc != 0 && th.Native[i].Addr != f.pc && !(running && i == 0) {
				diffs = append(diffs, fmt.Sprintf("thread %d frame #%d (%s): pc %#x, gdb %#x", th.TID, i, f.name, th.Native[i].Addr, f.pc))
			}
		}
	}
	for tid := range gdb {
		if !seen[tid] {
			diffs = append(diffs, fmt.Sprintf("thread %d: only in gdb's output", tid))
		}
	}
	return diffs
}

// TestMatchesGDB compares our stacks with gdb's `thread apply all bt`,
// frame by frame (function and pc) for every thread of a C and a C++
// program, then checks that the comparison would catch a wrong unwind.
func TestMatchesGDB(t *testing.T) {
	privileged.Root(t)
	const depth = 200
	for _, tc := range []struct {
		src     string
		running int
		args    []string
		// expect names functions some thread must show, innermost first,
		// as a contiguous run of frames.
		expect [][]string
	}{
		{"threads.c", 1, []string{fmt.Sprint(depth)}, [][]string{
			{"wait_on_cond", "cond_thread", "start_thread"},
			append(slices.Repeat([]string{"recurse"}, depth+1), "deep_thread"),
			{"in_handler", "handler", SignalFrame},
			{"spin_until_signal", "signal_thread"},
			{"burn_thread", "start_thread"},
			{"tail_inner", "tail_middle", "tail_outer", "tail_thread"},
			{"_IO_fgets", "main"},
		}},
		{"templates.cc", 0, nil, [][]string{
			{"fake::attention::softmax_kernel<float>", "fake::attention::Runner::run"},
			{"fake::depth<0>", "fake::depth<1>", "fake::depth<2>", "fake::depth<3>", "fake::depth<4>"},
		}},
	} {
		t.Run(tc.src, func(t *testing.T) {
			tg := start(t, build(t, tc.src), tc.running, tc.args...)
			res, err := NewUnwinder(nil).Dump(tg.pid, Options{Lines: true})
			if err != nil {
				t.Fatal(err)
			}
			gdb := gdbStacks(t, tg.pid)
			for _, d := range compareGDB(res.Threads, gdb) {
				t.Error(d)
			}
			for _, th := range res.Threads {
				// The name comes with the state, read before the stop.
				if comm, err := procfs.ThreadName(tg.pid, th.TID); err != nil || th.Name != comm {
					t.Errorf("thread %d named %q, comm %q (%v)", th.TID, th.Name, comm, err)
				}
			}
			for _, want := range tc.expect {
				found := false
				for _, th := range res.Threads {
					found = found || containsRun(names(th.Native), want)
				}
				if !found {
					t.Errorf("no thread shows %s", strings.Join(want, " <- "))
				}
			}
			if t.Failed() {
				return
			}
			// The comparison must catch any of these unwinding mistakes.
			for what, mutate := range map[string]func([]stack.Thread){
				"a frame dropped": func(ts []stack.Thread) {
					th := longest(ts)
					th.Native = slices.Delete(th.Native, 1, 2)
				},
				"a frame renamed": func(ts []stack.Thread) {
					th := longest(ts)
					th.Native[len(th.Native)-1].Func += "_"
				},
				"a caller's pc off": func(ts []stack.Thread) {
					for i := range ts {
						for j := range ts[i].Native {
							if j > 0 && gdb[ts[i].TID][j].pc != 0 {
								ts[i].Native[j].Addr++
								return
							}
						}
					}
				},
				"a thread missed": func(ts []stack.Thread) { ts[0].TID = -1 },
			} {
				ts := clone(res.Threads)
				mutate(ts)
				if len(compareGDB(ts, gdb)) == 0 {
					t.Errorf("the comparison missed %s", what)
				}
			}
		})
	}
}

// containsRun reports whether want appears in got as consecutive frames.
func containsRun(got, want []string) bool {
	for i := 0; i+len(want) <= len(got); i++ {
		if slices.Equal(got[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

func longest(ts []stack.Thread) *stack.Thread {
	best := &ts[0]
	for i := range ts {
		if len(ts[i].Native) > len(best.Native) {
			best = &ts[i]
		}
	}
	return best
}

func clone(ts []stack.Thread) []stack.Thread {
	out := slices.Clone(ts)
	for i := range out {
		out[i].Native = slices.Clone(out[i].Native)
	}
	return out
}

// TestMatchesEuStack compares our stacks named from the symbol tables
// alone (no Lines) with elfutils' `eu-stack -p`, which names them so,
// frame by frame (function and pc) for every thread of a C and a C++
// program; and checks that no debug information was read for them.
func TestMatchesEuStack(t *testing.T) {
	privileged.Root(t)
	for _, tc := range []struct {
		src     string
		running int
		args    []string
	}{
		{"threads.c", 1, []string{"20"}},
		{"templates.cc", 0, nil},
	} {
		t.Run(tc.src, func(t *testing.T) {
			tg := start(t, build(t, tc.src), tc.running, tc.args...)
			res, err := NewUnwinder(nil).Dump(tg.pid, Options{})
			if err != nil {
				t.Fatal(err)
			}
			eu := euStacks(t, tg.pid)
			for _, d := range compareStacks(res.Threads, eu, sameSymbol(t)) {
				t.Error(d)
			}
			for _, th := range res.Threads {
				for _, f := range th.Native {
					if f.File != "" || f.Line != 0 {
						t.Errorf("thread %d: %s at %s:%d: a source line without Lines", th.TID, f.Func, f.File, f.Line)
					}
				}
			}
		})
	}
}

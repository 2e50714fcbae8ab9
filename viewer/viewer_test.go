package viewer

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/xpu-timer/xpu-timer/collector/format/dumpfile"
	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/timeline"
	"github.com/xpu-timer/xpu-timer/viewer/flame"
	"github.com/xpu-timer/xpu-timer/viewer/rankset"
)

var update = flag.Bool("update", false, "rewrite fixtures and golden files")

const world = 8

func TestMain(m *testing.M) {
	flag.Parse()
	if *update {
		for _, f := range Faults {
			dir := faultDir(f.Kind)
			os.RemoveAll(dir)
			if _, err := writeFault(dir, f.Kind, world, f.Faulty); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
		}
	}
	before := runtime.NumGoroutine()
	code := m.Run()
	if code == 0 {
		// Every goroutine Run starts must be gone once it returns.
		deadline := time.Now().Add(2 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			fmt.Fprintf(os.Stderr, "goroutines leaked: %d before, %d after\n", before, n)
			code = 1
		}
	}
	os.Exit(code)
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// TestCulprit runs the viewer on every fault's fixture and checks that the
// report names the faulty rank, and only it.
func TestCulprit(t *testing.T) {
	for _, f := range Faults {
		t.Run(f.Kind, func(t *testing.T) {
			out := t.TempDir()
			res, err := Run(Options{Dir: faultDir(f.Kind), Out: out})
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Report.Culprits, []int{f.Faulty}) {
				t.Errorf("culprits %v, want [%d]\n%s", res.Report.Culprits, f.Faulty, res.Summary)
			}
			want := fmt.Sprintf("Likely culprit: rank %d\n", f.Faulty)
			if !strings.Contains(res.Summary, want) {
				t.Errorf("summary lacks %q:\n%s", want, res.Summary)
			}
			if res.Files != world || len(res.Skipped) != 0 || len(res.Missing) != 0 {
				t.Errorf("files %d, skipped %v, missing %v", res.Files, res.Skipped, res.Missing)
			}
			for _, name := range []string{timeline.CppFolded, timeline.PyFolded, timeline.MixedFolded, timeline.Summary} {
				data, err := os.ReadFile(filepath.Join(out, name))
				if err != nil {
					t.Fatal(err)
				}
				golden(t, filepath.Join("testdata", "golden", f.Kind, name), data)
			}
			for _, name := range []string{timeline.CppSVG, timeline.PySVG, timeline.MixedSVG, timeline.Profile} {
				if st, err := os.Stat(filepath.Join(out, name)); err != nil || st.Size() == 0 {
					t.Errorf("%s: %v", name, err)
				}
			}
		})
	}
}

// copyDir copies the fixture of kind into a temporary directory.
func copyDir(t *testing.T, kind string) string {
	t.Helper()
	dir := t.TempDir()
	paths, _ := filepath.Glob(filepath.Join(faultDir(kind), "*"+dumpfile.Ext))
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(p)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestMissingRank is xpu_timer's blind spot: the rank stuck on the CPU
// left no dump; the others all wait in the same collective.
func TestMissingRank(t *testing.T) {
	dir := copyDir(t, "python-sleep")
	os.Remove(filepath.Join(dir, dumpfile.Name(2, world)))
	res, err := Run(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Missing, []int{2}) || !slices.Equal(res.Report.Culprits, []int{2}) {
		t.Errorf("missing %v, culprits %v\n%s", res.Missing, res.Report.Culprits, res.Summary)
	}
	folded, _ := os.ReadFile(filepath.Join(dir, timeline.CppFolded))
	// Every frame's LEAK set holds rank 2.
	for _, line := range strings.Split(strings.TrimSpace(string(folded)), "\n") {
		for _, fr := range strings.Split(line[:strings.LastIndexByte(line, ' ')], ";") {
			l, ok := flame.ParseLabel(fr)
			leak, err := rankset.Parse(l.Leak)
			if !ok || err != nil || !slices.Contains(leak, 2) {
				t.Fatalf("frame %q: leak set lacks the missing rank", fr)
			}
		}
	}
	if !strings.Contains(res.Summary, "Ranks with no dump: 2") {
		t.Errorf("summary:\n%s", res.Summary)
	}
}

func TestBadInput(t *testing.T) {
	dir := copyDir(t, "nccl-stall")
	good, _ := os.ReadFile(filepath.Join(dir, dumpfile.Name(0, world)))
	bad := map[string][]byte{
		"00010-00012.stacktrace": good[:len(good)/2],                                             // truncated
		"00009-00012.stacktrace": []byte("{\"schema\":\"xpu-timer.stacktrace/1.0\",\"rank\":[}"), // corrupt
		"00008-00012.stacktrace": []byte(`{"schema":"py-spy","threads":[]}`),                     // foreign
		"00011-00012.stacktrace": nil,                                                            // empty
	}
	for name, data := range bad {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("not a stack file"), 0o644)
	res, err := Run(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Skipped) != 4 {
		t.Fatalf("skipped %v, want the 4 bad files", res.Skipped)
	}
	wantErr := []error{dumpfile.ErrForeign, dumpfile.ErrCorrupt, dumpfile.ErrTruncated, dumpfile.ErrEmpty}
	for i, s := range res.Skipped {
		if !errors.Is(s.Err, wantErr[i]) || !strings.Contains(s.Err.Error(), filepath.Base(s.Path)) {
			t.Errorf("skipped %s: %v, want %v naming the file", s.Path, s.Err, wantErr[i])
		}
		if !strings.Contains(res.Summary, filepath.Base(s.Path)) {
			t.Errorf("summary does not name %s", s.Path)
		}
	}
	// The unreadable files say nothing of their run: the readable ones,
	// one job of world size 8, are merged.
	if res.World != world || res.Files != world || len(res.Missing) != 0 {
		t.Errorf("world %d, files %d, missing %v", res.World, res.Files, res.Missing)
	}
	if !slices.Contains(res.Report.Culprits, 4) {
		t.Errorf("culprits %v lack rank 4\n%s", res.Report.Culprits, res.Summary)
	}
}

func TestNoStacks(t *testing.T) {
	empty := t.TempDir()
	if _, err := Run(Options{Dir: empty}); !errors.Is(err, ErrNoStacks) || !strings.Contains(err.Error(), empty) {
		t.Errorf("empty dir: %v", err)
	}
	allBad := t.TempDir()
	os.WriteFile(filepath.Join(allBad, "00000-00002.stacktrace"), []byte("{"), 0o644)
	if _, err := Run(Options{Dir: allBad}); !errors.Is(err, ErrNoStacks) || !strings.Contains(err.Error(), "00000-00002.stacktrace") {
		t.Errorf("only bad files: %v", err)
	}
	if _, err := Run(Options{Dir: filepath.Join(empty, "nope")}); err == nil {
		t.Error("missing dir: no error")
	}
}

func TestMismatchedName(t *testing.T) {
	dir := copyDir(t, "nccl-stall")
	// Rank 3's dump under rank 9's name: skipped, rank 3 counts as missing.
	os.Rename(filepath.Join(dir, dumpfile.Name(3, world)), filepath.Join(dir, dumpfile.Name(9, 10)))
	res, err := Run(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Skipped) != 1 || !errors.Is(res.Skipped[0].Err, dumpfile.ErrCorrupt) {
		t.Errorf("skipped %v", res.Skipped)
	}
	if res.World != world || !slices.Equal(res.Missing, []int{3}) {
		t.Errorf("world %d missing %v", res.World, res.Missing)
	}
}

func TestWeightRanks(t *testing.T) {
	out := t.TempDir()
	if _, err := Run(Options{Dir: faultDir("nccl-stall"), Out: out, Weight: flame.Ranks}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(out, timeline.CppFolded))
	// The State frames of all 8 ranks add up to 8 under --weight ranks.
	total := 0
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if strings.HasPrefix(line, "State@") {
			var n int
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &n)
			total += n
		}
	}
	if total != world {
		t.Errorf("State widths add to %d, want %d:\n%s", total, world, data)
	}
}

func TestProfile(t *testing.T) {
	out := t.TempDir()
	if _, err := Run(Options{Dir: faultDir("kernel-hang"), Out: out}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(out, timeline.Profile)
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	p, err := profile.Parse(fh)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var sawKernel bool
	for _, s := range p.Sample {
		var fns []string
		for _, l := range s.Location {
			fns = append(fns, l.Line[0].Function.Name)
		}
		if slices.Contains(fns, "flash_attn_bwd_kernel") {
			sawKernel = true
			if got := s.Label["ranks"]; !slices.Equal(got, []string{"3"}) {
				t.Errorf("kernel sample ranks %v, want [3]", got)
			}
		}
	}
	if !sawKernel {
		t.Error("no sample runs through flash_attn_bwd_kernel")
	}
	// go test puts its own toolchain's bin first on PATH.
	outp, err := exec.Command("go", "tool", "pprof", "-top", "-sample_index=ranks", path).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, outp)
	}
	if !strings.Contains(string(outp), "flash_attn_bwd_kernel") {
		t.Errorf("go tool pprof -top lacks the kernel:\n%s", outp)
	}
}

// A rank's helpers (its forked DataLoader workers) are in its picture,
// named as helpers.
func TestHelpersInPicture(t *testing.T) {
	dir := copyDir(t, "nccl-stall")
	path := filepath.Join(dir, dumpfile.Name(1, world))
	f, err := dumpfile.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	f.Helpers = []dumpfile.Helper{{PID: 4242, State: "S (sleeping)", Threads: []stack.Thread{{TID: 4242, Name: "pt_data_worker",
		Native: []stack.Frame{{Func: "__libc_read", Module: "libc.so.6"}, {Func: "worker_loop", File: "worker.py", Line: 7, Module: "python"}}}}}}
	if _, err := dumpfile.Write(dir, f); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if _, err := Run(Options{Dir: dir, Out: out}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "cpp_stack"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "worker_loop@worker.py:7@1|") {
		t.Errorf("rank 1's helper is not in cpp_stack:\n%s", b)
	}
}

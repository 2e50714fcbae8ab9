// Command gpucheck-probe is the anchor and the meter of make gpu-check's
// launch-overhead table (issue 30): it turns on the kernel's BPF
// statistics, optionally attaches empty uprobes (a program that returns
// 0) to the given library functions of every process, runs a command,
// and when the command ends prints the run count and run time of its own
// programs and of every BPF program the command's process held (the
// launcher's), one line each:
//
//	gpucheck-bpf owner=empty prog=empty_0 target=cudaLaunchKernel runs=602001 run_ns=118000000
//
// Usage:
//
//	gpucheck-probe [-uprobe LIB:SYMBOL[+OFFSET]]... [-uretprobe LIB:SYMBOL]... [-floor LIB:SYMBOL[+OFFSET]]... -- CMD ARGS...
//
// OFFSET (bytes from the symbol, 0x for hex) places the probe inside the
// function: where the kernel emulates the instruction rather than
// single-stepping it; "site" is where our probes go (ebpf.ProbeSite).
//
// -floor attaches, at one function, two programs that each take one step
// of our launch program alone: floor_clock reads the clock
// (bpf_ktime_get_ns), floor_stack reads the 24 bytes of stack arguments
// cu_launch_kernel reads (one bpf_probe_read_user). With an empty uprobe
// at the same place they share its trap, and their run times less the
// empty one's are what each step costs on that machine.
//
// SIGUSR1 prints a snapshot of the same, each line tagged with the
// snapshot's number (gpucheck-bpf snap=N owner=...), after a line
// "gpucheck-snap N time=UNIX_NS": the statistics of a window are the
// difference of two snapshots (paired.py).
//
// It exits with the command's status. Built statically with the other
// binaries, it needs root (or CAP_BPF and CAP_PERFMON) where it runs.
package main

import (
	"bufio"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	xebpf "github.com/xpu-timer/xpu-timer/ebpf"
)

// uprobes are the -uprobe flags.
type uprobes []string

func (u *uprobes) String() string     { return strings.Join(*u, ",") }
func (u *uprobes) Set(v string) error { *u = append(*u, v); return nil }

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			os.Exit(exit.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "gpucheck-probe:", err)
		os.Exit(2)
	}
}

// progStat is one program's statistics.
type progStat struct {
	owner, name, target string
	runs, ns            uint64
}

func (p progStat) String() string {
	return fmt.Sprintf("gpucheck-bpf owner=%s prog=%s target=%s runs=%d run_ns=%d", p.owner, p.name, p.target, p.runs, p.ns)
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gpucheck-probe", flag.ContinueOnError)
	var targets, rets uprobes
	var floors uprobes
	fs.Var(&targets, "uprobe", "LIB:SYMBOL to attach an empty uprobe to (repeatable)")
	fs.Var(&rets, "uretprobe", "LIB:SYMBOL to attach an empty uretprobe to (repeatable)")
	fs.Var(&floors, "floor", "LIB:SYMBOL to attach the step floors to (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("no command: usage gpucheck-probe [-uprobe LIB:SYMBOL]... -- CMD ARGS")
	}
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return fmt.Errorf("enable bpf stats: %w", err)
	}
	defer stats.Close()
	empty, err := attachEmpty(targets, emptyProgs, false)
	if err == nil {
		var more []emptyProbe
		more, err = attachEmpty(floors, floorProgs, false)
		empty = append(empty, more...)
		if err == nil {
			more, err = attachEmpty(rets, retProgs, true)
			empty = append(empty, more...)
		}
	}
	defer func() {
		for _, e := range empty {
			e.close()
		}
	}()
	if err != nil {
		return err
	}

	// Before the command starts: its first line may bring a SIGUSR1,
	// whose default action would end this process.
	snap := make(chan os.Signal, 1)
	signal.Notify(snap, syscall.SIGUSR1)
	defer signal.Stop(snap)
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, stdout, stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", fs.Arg(0), err)
	}
	var (
		mu   sync.Mutex
		last map[uint32]progStat
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	names := map[uint32]string{}
	var serr error
	wg.Add(1)
	go func() {
		// The command's programs vanish with it: keep the last snapshot.
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for n := 1; ; {
			if s := childProgs(cmd.Process.Pid, names); len(s) > 0 {
				mu.Lock()
				last = s
				mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-tick.C:
			case <-snap:
				// Every program's statistics now, each line tagged snap=N.
				out, err := snapshot(empty, childProgs(cmd.Process.Pid, names))
				if err != nil {
					serr = err
					continue
				}
				fmt.Fprintf(stdout, "gpucheck-snap %d time=%d\n", n, time.Now().UnixNano())
				for _, p := range out {
					fmt.Fprintf(stdout, "gpucheck-bpf snap=%d %s\n", n, strings.TrimPrefix(p.String(), "gpucheck-bpf "))
				}
				n++
			}
		}
	}()
	werr := cmd.Wait()
	close(done)
	wg.Wait()
	if serr != nil {
		return serr
	}
	mu.Lock()
	out, err := snapshot(empty, last)
	mu.Unlock()
	if err != nil {
		return err
	}
	for _, p := range out {
		fmt.Fprintln(stdout, p)
	}
	return werr
}

// snapshot is the statistics of our programs and of the command's
// (child), sorted by owner and name.
func snapshot(empty []emptyProbe, child map[uint32]progStat) ([]progStat, error) {
	var out []progStat
	for _, e := range empty {
		st, err := e.prog.Stats()
		if err != nil {
			return nil, fmt.Errorf("stats of %s: %w", e.name, err)
		}
		out = append(out, progStat{e.owner, e.name, e.target, st.RunCount, uint64(st.Runtime)})
	}
	for _, p := range child {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].owner+out[i].name < out[j].owner+out[j].name })
	return out, nil
}

// emptyProbe is one of our programs (empty, or a floor) attached at one
// function.
type emptyProbe struct {
	owner, name, target string
	prog                *ebpf.Program
	link                link.Link
}

// progKind is a program attachEmpty attaches at each target.
type progKind struct {
	owner, name string
	insns       asm.Instructions
}

// ptRegsSP is the offset of sp in x86-64's struct pt_regs, a uprobe's context.
const ptRegsSP = 19 * 8

var (
	emptyProgs = []progKind{{"empty", "empty", asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}}}
	retProgs   = []progKind{{"empty", "emptyret", asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()}}}
	floorProgs = []progKind{
		{"floor", "floor_clock", asm.Instructions{asm.FnKtimeGetNs.Call(), asm.Mov.Imm(asm.R0, 0), asm.Return()}},
		{"floor", "floor_stack", asm.Instructions{
			asm.LoadMem(asm.R3, asm.R1, ptRegsSP, asm.DWord),
			asm.Add.Imm(asm.R3, 8), // the first stack argument
			asm.Mov.Reg(asm.R1, asm.RFP),
			asm.Add.Imm(asm.R1, -24),
			asm.Mov.Imm(asm.R2, 24),
			asm.FnProbeReadUser.Call(),
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		}},
	}
)

func (e emptyProbe) close() {
	if e.link != nil {
		e.link.Close()
	}
	e.prog.Close()
}

// attachEmpty attaches the programs of kinds at each LIB:SYMBOL, in every
// process that maps LIB; with ret, at its returns (a uretprobe).
func attachEmpty(targets []string, kinds []progKind, ret bool) ([]emptyProbe, error) {
	var out []emptyProbe
	for i, t := range targets {
		lib, sym, ok := strings.Cut(t, ":")
		if !ok || lib == "" || sym == "" {
			return out, fmt.Errorf("uprobe %q: want LIB:SYMBOL[+OFFSET]", t)
		}
		var off uint64
		label := sym
		if s, o, ok := strings.Cut(sym, "+"); ok {
			sym = s
			if o == "site" {
				v, err := siteOf(lib, sym)
				if err != nil {
					return out, fmt.Errorf("uprobe %q: %w", t, err)
				}
				off, label = v, fmt.Sprintf("%s+%d(site)", sym, v)
			} else {
				v, err := strconv.ParseUint(o, 0, 64)
				if err != nil {
					return out, fmt.Errorf("uprobe %q: offset %q: %w", t, o, err)
				}
				off = v
			}
		}
		for _, k := range kinds {
			name := fmt.Sprintf("%s_%d", k.name, i)
			prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
				Name:         name,
				Type:         ebpf.Kprobe,
				License:      "GPL",
				Instructions: k.insns,
			})
			if err != nil {
				return out, fmt.Errorf("load %s program: %w", k.name, err)
			}
			e := emptyProbe{owner: k.owner, name: name, target: label, prog: prog}
			ex, err := link.OpenExecutable(lib)
			switch {
			case err == nil && ret:
				e.target += "(ret)"
				e.link, err = ex.Uretprobe(sym, prog, nil)
			case err == nil:
				e.link, err = ex.Uprobe(sym, prog, &link.UprobeOptions{Offset: off})
			}
			out = append(out, e)
			if err != nil {
				return out, fmt.Errorf("attach %s in %s: %w", sym, lib, err)
			}
		}
	}
	return out, nil
}

// siteOf is the offset from sym in lib where our probes go (ebpf.ProbeSiteAt).
func siteOf(lib, sym string) (uint64, error) {
	f, err := elf.Open(lib)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return 0, err
	}
	for _, s := range syms {
		if s.Name == sym && elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			return uint64(xebpf.ProbeSiteAt(f, s.Value)), nil
		}
	}
	return 0, fmt.Errorf("no function %s in %s", sym, lib)
}

// childProgs reads the statistics of the BPF programs pid holds open from
// its fdinfo; names caches program names by id.
func childProgs(pid int, names map[uint32]string) map[uint32]progStat {
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[uint32]progStat{}
	for _, ent := range ents {
		f, err := os.Open(filepath.Join(dir, ent.Name()))
		if err != nil {
			continue
		}
		kv := map[string]string{}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok {
				kv[k] = strings.TrimSpace(v)
			}
		}
		f.Close()
		id64, err := strconv.ParseUint(kv["prog_id"], 10, 32)
		if err != nil {
			continue
		}
		id := uint32(id64)
		if _, ok := names[id]; !ok {
			names[id] = progName(id)
		}
		runs, _ := strconv.ParseUint(kv["run_cnt"], 10, 64)
		ns, _ := strconv.ParseUint(kv["run_time_ns"], 10, 64)
		out[id] = progStat{"command", names[id], "-", runs, ns}
	}
	return out
}

func progName(id uint32) string {
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return fmt.Sprintf("id%d", id)
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil || info.Name == "" {
		return fmt.Sprintf("id%d", id)
	}
	return fmt.Sprintf("%s#%d", info.Name, id)
}

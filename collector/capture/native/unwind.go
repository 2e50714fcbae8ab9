//go:build linux && amd64

package native

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"github.com/go-delve/delve/pkg/dwarf/frame"
	"github.com/go-delve/delve/pkg/dwarf/op"

	"github.com/xpu-timer/xpu-timer/collector/format/stack"
	"github.com/xpu-timer/xpu-timer/internal/symbols"
)

// SignalFrame is the name of the frame of a signal trampoline, as gdb prints it.
const SignalFrame = "<signal handler called>"

// The DWARF numbers of the x86-64 registers (System V psABI, figure 3.36),
// regnum's AMD64_ constants: importing regnum itself costs every start of
// a one-shot dump binary 0.5 ms, building its tables of register names
// for every architecture (TestRegisterNumbers checks that they agree).
const (
	regRax = iota
	regRdx
	regRcx
	regRbx
	regRsi
	regRdi
	regRbp
	regRsp
	regR8
	regR9
	regR10
	regR11
	regR12
	regR13
	regR14
	regR15
	regRip // the return address column
)

const nregs = regRip + 1

// regs are the DWARF-numbered registers of one frame (rip is the return address column).
type regs struct {
	v  [nregs]uint64
	ok [nregs]bool
}

func (r *regs) set(n int, v uint64) { r.v[n], r.ok[n] = v, true }

// memory reads the target: the copied stack first, the live process after.
type memory struct {
	lo   uint64
	b    []byte
	live func([]byte, uint64) (int, error)
}

func (m *memory) read(b []byte, addr uint64) (int, error) {
	if addr >= m.lo && addr+uint64(len(b)) <= m.lo+uint64(len(m.b)) {
		return copy(b, m.b[addr-m.lo:]), nil
	}
	if m.live == nil {
		return 0, fmt.Errorf("read %#x: not in the stack copy", addr)
	}
	n, err := m.live(b, addr)
	if n < len(b) {
		if err == nil {
			err = errors.New("short read")
		}
		return n, fmt.Errorf("read %#x: %w", addr, err)
	}
	return n, nil
}

func (m *memory) u64(addr uint64) (uint64, error) {
	var b [8]byte
	if _, err := m.read(b[:], addr); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

// sigreturn is the code of glibc's (and the kernel's vDSO) __restore_rt:
// mov $15, %rax; syscall.
var sigreturn = []byte{0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05}

// step is one frame found by walking a stack, before it is named.
type step struct {
	pc     uint64 // the frame's pc: a return address but in the innermost frame and below a signal
	lookup uint64 // where the frame is looked up: pc, or pc-1 for a return address
	signal bool   // a signal trampoline
	cfi    bool   // its caller's registers came from call frame information
}

// unwind walks one thread's stack from its copied registers and names its
// frames (see frames for lines).
func unwind(proc *symbols.Process, t *snapshot, live func([]byte, uint64) (int, error), ra ReturnAddressFunc, lines bool) ([]stack.Frame, error) {
	steps, err := walk(proc, t, live, ra)
	steps, err = atMain(proc, steps, err)
	return frames(proc, steps, lines), err
}

// atMain ends a walk's steps at the frame of main, as gdb does; an error
// past it goes too. walk goes on past main: naming a frame needs the
// symbol tables of its module, which for libc may lie in megabytes of a
// separate debug file, read meanwhile on another goroutine.
func atMain(proc *symbols.Process, steps []step, err error) ([]step, error) {
	for i, s := range steps {
		if s.signal {
			continue
		}
		if name, ok := proc.Function(s.lookup); ok && name == "main" {
			if i+1 < len(steps) || err == nil {
				return steps[:i+1], nil
			}
		}
	}
	return steps, err
}

// walk follows one thread's stack from its copied registers: call frame
// information, else the frame pointer, and the registers saved by the
// kernel across a signal trampoline. A return address that a uretprobe
// replaced with the kernel's trampoline is looked up with ra.
func walk(proc *symbols.Process, t *snapshot, live func([]byte, uint64) (int, error), ra ReturnAddressFunc) ([]step, error) {
	mem := &memory{lo: t.stackLo, b: t.stack, live: live}
	var r regs
	g := &t.regs
	for n, v := range map[int]uint64{
		regRax: g.Rax, regRdx: g.Rdx, regRcx: g.Rcx, regRbx: g.Rbx,
		regRsi: g.Rsi, regRdi: g.Rdi, regRbp: g.Rbp, regRsp: g.Rsp,
		regR8: g.R8, regR9: g.R9, regR10: g.R10, regR11: g.R11,
		regR12: g.R12, regR13: g.R13, regR14: g.R14, regR15: g.R15,
		regRip: g.Rip,
	} {
		r.set(n, v)
	}
	var steps []step
	exact := true // the pc is not a return address: innermost frame or interrupted by a signal
	for len(steps) < MaxFrames {
		pc := r.v[regRip]
		if pc == 0 {
			return steps, nil
		}
		lookup := pc
		if !exact {
			lookup = pc - 1
		}
		mod, fde := frameInfo(proc, lookup)
		if isSigreturn(mem, pc, fde) {
			steps = append(steps, step{pc: pc, lookup: pc, signal: true})
			if err := restoreSignal(mem, &r); err != nil {
				return steps, fmt.Errorf("unwind signal frame: %w", err)
			}
			exact = true
			continue
		}
		steps = append(steps, step{pc: pc, lookup: lookup})
		sp := r.v[regRsp]
		end, cfi, err := next(mod, fde, mem, &r, lookup)
		if err != nil {
			return steps, err
		}
		if end {
			return steps, nil
		}
		if r.v[regRsp] <= sp {
			return steps, fmt.Errorf("unwind at %#x: stack pointer did not advance", pc)
		}
		if caller := r.v[regRip]; uprobeTrampoline(proc, caller) {
			real, ok := uint64(0), false
			if ra != nil {
				real, ok = ra(t.tid, r.v[regRsp]-8)
			}
			if !ok {
				return steps, fmt.Errorf("unwind at %#x: a uretprobe replaced the return address with the kernel's trampoline at %#x; only the tracer that placed it (the launcher or agent probing this process) can restore it", pc, caller)
			}
			r.set(regRip, real)
		}
		steps[len(steps)-1].cfi = cfi
		exact = false
	}
	return steps, fmt.Errorf("stack deeper than %d frames: cut", MaxFrames)
}

// uprobeTrampoline reports whether pc is in the kernel's [uprobes] area,
// where a uretprobe sends the probed call's return.
func uprobeTrampoline(proc *symbols.Process, pc uint64) bool {
	mod, ok := proc.Module(pc)
	return ok && mod.Path == "[uprobes]"
}

// frames names the steps of a walk, a frame each from the symbol tables;
// with lines, from the debug information too, as gdb does: source lines,
// inlined calls, and the functions that a caller left by tail calls
// (jumps, which leave no frame) between a frame and its caller, recovered
// from call sites.
func frames(proc *symbols.Process, steps []step, lines bool) []stack.Frame {
	var out []stack.Frame
	for i, s := range steps {
		if s.signal {
			out = append(out, stack.Frame{Func: SignalFrame, Addr: s.pc})
			continue
		}
		if !lines {
			sym, _ := proc.LookupName(s.lookup)
			out = append(out, frameOf(sym, s.pc))
			continue
		}
		out = append(out, symbolize(proc, s.pc, s.lookup)...)
		if s.cfi && i+1 < len(steps) {
			for _, tc := range proc.TailCalls(steps[i+1].pc, s.lookup) {
				out = append(out, tailFrame(proc, tc))
			}
		}
	}
	return out
}

// frameInfo finds the module and the call frame information entry of an
// address; either is nil when there is none.
func frameInfo(proc *symbols.Process, lookup uint64) (*symbols.Module, *frame.FrameDescriptionEntry) {
	mod, ok := proc.Module(lookup)
	if !ok || mod.Object == nil {
		return nil, nil
	}
	fde, err := mod.Object.FDE(mod.Vaddr(lookup))
	if err != nil {
		return mod, nil
	}
	return mod, fde
}

// isSigreturn reports whether pc is at a signal trampoline. Call frame
// information marks one ('S' augmentation); other code with call frame
// information is not one, and is not read.
func isSigreturn(mem *memory, pc uint64, fde *frame.FrameDescriptionEntry) bool {
	if fde != nil && fde.CIE != nil && !strings.Contains(fde.CIE.Augmentation, "S") {
		return false
	}
	b := make([]byte, len(sigreturn))
	if _, err := mem.read(b, pc); err != nil {
		return false
	}
	return bytes.Equal(b, sigreturn)
}

// restoreSignal loads the registers saved in the ucontext a signal
// trampoline returns through: struct rt_sigframe's uc sits at the stack
// pointer, its mcontext 40 bytes in (uc_flags, uc_link, uc_stack).
func restoreSignal(mem *memory, r *regs) error {
	base := r.v[regRsp] + 40
	b := make([]byte, 17*8)
	if _, err := mem.read(b, base); err != nil {
		return err
	}
	get := func(i int) uint64 { return binary.LittleEndian.Uint64(b[i*8:]) }
	// struct sigcontext: r8..r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip
	order := []int{regR8, regR9, regR10, regR11, regR12,
		regR13, regR14, regR15, regRdi, regRsi,
		regRbp, regRbx, regRdx, regRax, regRcx,
		regRsp, regRip}
	for i, n := range order {
		r.set(n, get(i))
	}
	return nil
}

// symbolize names the frame at pc (looked up at lookup), inlined calls
// first when debug information has them.
func symbolize(proc *symbols.Process, pc, lookup uint64) []stack.Frame {
	syms := proc.LookupInline(lookup)
	if len(syms) == 0 {
		s, _ := proc.Lookup(lookup)
		syms = []symbols.Symbol{s}
	}
	out := make([]stack.Frame, len(syms))
	for i, s := range syms {
		out[i] = frameOf(s, pc)
	}
	return out
}

// frameOf is the frame at pc of symbol s.
func frameOf(s symbols.Symbol, pc uint64) stack.Frame {
	f := stack.Frame{Func: s.Name, File: s.File, Line: s.Line, Module: s.Module, Addr: pc}
	if f.Func == "" {
		f.Func = "??"
	}
	return f
}

// tailFrame names the frame of a function left by a tail call at pc (the
// address after the jump): its innermost function there, as gdb names it.
func tailFrame(proc *symbols.Process, pc uint64) stack.Frame {
	fs := symbolize(proc, pc, pc-1)
	return fs[0]
}

// next computes the caller's registers. end is true at the outermost
// frame; cfi when call frame information (not the frame pointer) gave them.
func next(mod *symbols.Module, fde *frame.FrameDescriptionEntry, mem *memory, r *regs, lookup uint64) (end, cfi bool, err error) {
	if fde != nil {
		end, err := stepCFI(fde, mod, mem, r, lookup)
		return end, true, err
	}
	if mod != nil && mod.Object != nil {
		if _, ferr := mod.Object.FDE(mod.Vaddr(lookup)); !errors.Is(ferr, symbols.ErrNoFDE) {
			err = ferr
		}
	}
	// No call frame information (anonymous or JIT memory, or a file
	// without it): follow the frame pointer chain.
	bp := r.v[regRbp]
	if !r.ok[regRbp] || bp < r.v[regRsp] || bp == 0 {
		if err != nil {
			return false, false, err
		}
		return false, false, fmt.Errorf("unwind at %#x: no call frame information and no frame pointer", lookup)
	}
	ra, err1 := mem.u64(bp + 8)
	next, err2 := mem.u64(bp)
	if err1 != nil || err2 != nil {
		return false, false, fmt.Errorf("unwind at %#x by frame pointer: %w", lookup, errors.Join(err1, err2))
	}
	r.set(regRip, ra)
	r.set(regRbp, next)
	r.set(regRsp, bp+16)
	return ra == 0, false, nil
}

func establish(fde *frame.FrameDescriptionEntry, vaddr uint64) (ctx *frame.FrameContext, err error) {
	defer func() {
		if p := recover(); p != nil {
			ctx, err = nil, fmt.Errorf("corrupt call frame information: %v", p)
		}
	}()
	return fde.EstablishFrame(vaddr)
}

func stepCFI(fde *frame.FrameDescriptionEntry, mod *symbols.Module, mem *memory, r *regs, lookup uint64) (bool, error) {
	ctx, err := establish(fde, mod.Vaddr(lookup))
	if err != nil {
		return false, fmt.Errorf("unwind at %#x: %w", lookup, err)
	}
	dregs := r.dwarf(0)
	var cfa uint64
	switch ctx.CFA.Rule {
	case frame.RuleCFA:
		if int(ctx.CFA.Reg) >= nregs || !r.ok[ctx.CFA.Reg] {
			return false, fmt.Errorf("unwind at %#x: CFA register %d unknown", lookup, ctx.CFA.Reg)
		}
		cfa = uint64(int64(r.v[ctx.CFA.Reg]) + ctx.CFA.Offset)
	case frame.RuleExpression, frame.RuleValExpression:
		v, _, err := op.ExecuteStackProgram(*dregs, ctx.CFA.Expression, 8, mem.read)
		if err != nil {
			return false, fmt.Errorf("unwind at %#x: CFA expression: %w", lookup, err)
		}
		cfa = uint64(v)
	default:
		return false, fmt.Errorf("unwind at %#x: unsupported CFA rule %d", lookup, ctx.CFA.Rule)
	}
	dregs = r.dwarf(int64(cfa))
	ra, ok := ctx.Regs[ctx.RetAddrReg]
	if !ok || ra.Rule == frame.RuleUndefined {
		return true, nil // outermost frame
	}
	next := *r
	for n, rule := range ctx.Regs {
		if n >= nregs || rule.Rule == frame.RuleSameVal {
			continue
		}
		v, known, err := ruleValue(rule, cfa, r, dregs, mem)
		if err != nil {
			if n == ctx.RetAddrReg {
				return false, fmt.Errorf("unwind at %#x: return address: %w", lookup, err)
			}
			next.ok[n] = false
			continue
		}
		next.v[n], next.ok[n] = v, known
	}
	if !next.ok[regRip] {
		return true, nil
	}
	next.set(regRsp, cfa)
	*r = next
	return false, nil
}

func ruleValue(rule frame.DWRule, cfa uint64, r *regs, dregs *op.DwarfRegisters, mem *memory) (uint64, bool, error) {
	switch rule.Rule {
	case frame.RuleUndefined:
		return 0, false, nil
	case frame.RuleOffset:
		v, err := mem.u64(uint64(int64(cfa) + rule.Offset))
		return v, err == nil, err
	case frame.RuleValOffset:
		return uint64(int64(cfa) + rule.Offset), true, nil
	case frame.RuleRegister:
		if rule.Reg >= nregs || !r.ok[rule.Reg] {
			return 0, false, nil
		}
		return r.v[rule.Reg], true, nil
	case frame.RuleExpression, frame.RuleValExpression:
		prog := append([]byte{byte(op.DW_OP_call_frame_cfa)}, rule.Expression...)
		v, _, err := op.ExecuteStackProgram(*dregs, prog, 8, mem.read)
		if err != nil {
			return 0, false, err
		}
		if rule.Rule == frame.RuleValExpression {
			return uint64(v), true, nil
		}
		w, err := mem.u64(uint64(v))
		return w, err == nil, err
	case frame.RuleCFA:
		if rule.Reg >= nregs || !r.ok[rule.Reg] {
			return 0, false, nil
		}
		return uint64(int64(r.v[rule.Reg]) + rule.Offset), true, nil
	}
	return 0, false, fmt.Errorf("unsupported register rule %d", rule.Rule)
}

// dwarf converts the registers for delve's expression evaluator.
func (r *regs) dwarf(cfa int64) *op.DwarfRegisters {
	list := make([]*op.DwarfRegister, nregs)
	for i := range list {
		if r.ok[i] {
			list[i] = op.DwarfRegisterFromUint64(r.v[i])
		}
	}
	d := op.NewDwarfRegisters(0, list, binary.LittleEndian, regRip, regRsp, regRbp, 0)
	d.CFA = cfa
	return d
}

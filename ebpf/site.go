package ebpf

import (
	"bytes"

	"golang.org/x/arch/x86/x86asm"
)

// A uprobe replaces one instruction with a breakpoint. When the process
// hits it, the kernel either emulates the instruction it replaced (x86-64:
// a push of a register, a relative jump, call or conditional jump; a nop
// since Linux 6.x) or copies it to a page of the process and single-steps
// it there, a second trap. On this project's VM the single-step made a hit
// cost 14-18 us against about 1 us emulated.
//
// NVIDIA's 535 driver (Debian's libcuda1) exports each driver function as
// a stub whose first instruction is a compare with a RIP-relative operand,
// which the kernel cannot emulate:
//
//	cmpl $0x321cba00, flag(%rip)   ; the driver deinitialised?
//	je   1f                        ; then return CUDA_ERROR_DEINITIALIZED
//	jmp  *table(%rip)              ; else the implementation
//
// The conditional jump after it is emulated, and every call passes it
// with the arguments, the stack pointer and the return address where they
// were at the entry: only the flags changed. So a probe there reads what
// it would read at the entry, and costs one trap. (The H100's 580 driver
// begins cuLaunchKernel with an instruction the kernel emulates: its site
// is the entry, and an empty uprobe there cost what one on
// cudaLaunchKernel does.)

// maxSiteSkip bounds how far into a function the site may move.
const maxSiteSkip = 32

var endbr64 = []byte{0xf3, 0x0f, 0x1e, 0xfa}

// ProbeSite returns where in a function, whose first bytes are code, to
// put its uprobes (the offset our probes take; gpucheck-probe's
// LIB:SYMBOL+site): the offset of its first instruction the kernel
// emulates, if only instructions that change nothing but the flags come
// before it (endbr64, nop, cmp, test), else 0. A probe there sees the
// registers, the stack and the return address of the entry, as entry and
// return programs need.
func ProbeSite(code []byte) int {
	off := 0
	for off < maxSiteSkip && off < len(code) {
		rest := code[off:]
		if bytes.HasPrefix(rest, endbr64) {
			off += len(endbr64) // x86asm does not know it; a nop outside CET
			continue
		}
		in, err := x86asm.Decode(rest, 64)
		if err != nil {
			return 0
		}
		switch {
		case emulated(in, rest):
			return off
		case flagsOnly(in):
			off += in.Len
		default:
			return 0
		}
	}
	return 0
}

// emulated says whether the kernel's x86 uprobes emulate in (raw: its
// bytes): a push of a register, one byte or REX.B and one byte
// (push_setup_xol_ops), or a relative jump, call or conditional jump
// without an operand-size prefix (branch_setup_xol_ops).
func emulated(in x86asm.Inst, raw []byte) bool {
	switch in.Op {
	case x86asm.PUSH:
		if _, reg := in.Args[0].(x86asm.Reg); !reg {
			return false
		}
		return in.Len == 1 || in.Len == 2 && raw[0] == 0x41
	case x86asm.JMP, x86asm.CALL, x86asm.JA, x86asm.JAE, x86asm.JB, x86asm.JBE, x86asm.JE, x86asm.JG,
		x86asm.JGE, x86asm.JL, x86asm.JLE, x86asm.JNE, x86asm.JNO, x86asm.JNP, x86asm.JNS, x86asm.JO,
		x86asm.JP, x86asm.JS:
		if _, rel := in.Args[0].(x86asm.Rel); !rel {
			return false
		}
		return raw[0] != 0x66
	}
	return false
}

// flagsOnly says whether in writes nothing but the flags: no register,
// no memory, no stack pointer.
func flagsOnly(in x86asm.Inst) bool {
	switch in.Op {
	case x86asm.CMP, x86asm.TEST, x86asm.NOP:
		for _, p := range in.Prefix {
			if p&0xff == x86asm.PrefixLOCK&0xff {
				return false
			}
		}
		return true
	}
	return false
}

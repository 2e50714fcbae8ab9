# nvstubs.awk: from cu* names driver.o defines (one a line; the Makefile
# picks the launches), the entry stubs of libcuda.so.1 (MODE=asm) and the
# header that renames each definition to fg_impl_<name> (MODE=h). NVIDIA's
# 535 libcuda.so.1 exports every driver function as such a stub: a compare of a word with a magic
# number (the driver's deinitialised state; equal: return
# CUDA_ERROR_DEINITIALIZED, 4), then an indirect jump through a table to
# the implementation. A uprobe on the stub's first instruction, a compare
# with a RIP-relative operand that the kernel cannot emulate, is
# single-stepped out of line: two traps a hit. So the testbed's driver
# entry points are the same, and the probes must find a better site (the
# conditional jump, which the kernel emulates: ebpf/site.go).
MODE == "h" { printf "#define %s fg_impl_%s\n", $1, $1; next }
NR == 1 {
	print "\t.section .note.GNU-stack,\"\",@progbits"
	print "\t.local fg_deinit"
	print "\t.comm fg_deinit,4,4"
}
{
	print "\t.text"
	print "\t.globl " $1
	print "\t.type " $1 ", @function"
	print "\t.p2align 4"
	print $1 ":"
	print "\t.cfi_startproc"
	print "\tcmpl $0x321cba00, fg_deinit(%rip)"
	print "\tje 1f"
	print "\tjmp *fg_tab_" $1 "(%rip)"
	print "\tnopw 0(%rax,%rax,1)"
	print "1:\tmovl $4, %eax"
	print "\tret"
	print "\t.cfi_endproc"
	print "\t.size " $1 ", .-" $1
	print "\t.section .data.rel.ro,\"aw\""
	print "\t.p2align 3"
	print "fg_tab_" $1 ":"
	print "\t.quad fg_impl_" $1
}

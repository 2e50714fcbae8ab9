//go:build linux && (386 || amd64)

package ebpf

// bpf2go compiles probes.bpf.c with the pinned clang-16 into
// probes_x86_bpfel.o and writes probes_x86_bpfel.go, which embeds it and
// declares the Go twins of the C types named by -type: struct call (the
// record of the call rings and the process ring buffer), struct func_key,
// and the enums kind and proc_kind (the record kinds). Both outputs are committed; `make generate` reruns
// this line and scripts/generate.sh --check fails when they are stale.
// -target amd64, not bpfel, so the PT_REGS macros know x86-64's registers;
// -mcpu=v3 for the atomic fetch-and-add that reserves a call ring slot.
//
//go:generate go tool bpf2go -tags linux -target amd64 -cc clang-16 -strip llvm-strip-16 -cflags "-O2 -mcpu=v3 -g -Wall -Werror" -type call -type func_key -type kind -type proc_kind -type proc_phase -type unheld_why probes probes.bpf.c

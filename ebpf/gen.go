package ebpf

//go:generate go tool bpf2go -tags linux -target amd64 -cc clang-16 -strip llvm-strip-16 -cflags "-O2 -g -Wall -Werror" -type event -type func_key probes probes.bpf.c

/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * The few kernel types probes.bpf.c needs, written by hand so that
 * generation depends only on clang and libbpf's bpf_helpers.h and
 * bpf_tracing.h (Debian's libbpf-dev), not on a machine's vmlinux.h.
 */
#ifndef XPU_TYPES_H
#define XPU_TYPES_H

typedef unsigned char __u8;
typedef signed char __s8;
typedef unsigned short __u16;
typedef short __s16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u64 __be64;
typedef __u32 __wsum;

enum bpf_map_type {
	BPF_MAP_TYPE_HASH = 1,
	BPF_MAP_TYPE_ARRAY = 2,
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
	BPF_MAP_TYPE_TASK_STORAGE = 29,
};

enum {
	BPF_ANY = 0,
	BPF_NOEXIST = 1,
};

/* Map flags. */
enum {
	BPF_F_NO_PREALLOC = 1U << 0,
	BPF_F_MMAPABLE = 1U << 10,
};

/* bpf_task_storage_get flags. */
enum {
	BPF_LOCAL_STORAGE_GET_F_CREATE = 1,
};

/* bpf_ringbuf_submit flags and bpf_ringbuf_query fields. */
enum {
	BPF_RB_NO_WAKEUP = 1,
	BPF_RB_FORCE_WAKEUP = 2,
};

/*
 * x86-64 user registers as the kernel saves them (arch/x86/include/asm/
 * ptrace.h). Defining __VMLINUX_H__ makes bpf_tracing.h use these (kernel)
 * field names in PT_REGS_PARM1() and friends.
 */
#define __VMLINUX_H__
struct pt_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

/*
 * The two task_struct fields the fork hook reads. preserve_access_index
 * makes clang emit CO-RE relocations, which the loader resolves against the
 * running kernel's BTF: their offsets are never hard-coded.
 */
struct task_struct {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

#endif

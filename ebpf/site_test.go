package ebpf

import "testing"

// The probe site moves past instructions that change nothing but the flags
// to one the kernel emulates, and stays at the entry otherwise.
func TestProbeSite(t *testing.T) {
	for _, c := range []struct {
		name string
		code []byte
		want int
	}{
		{"NVIDIA driver stub: cmpl $magic, flag(%rip); je", []byte{0x81, 0x3d, 0x7e, 0x92, 0x8d, 0x01, 0x00, 0xba, 0x1c, 0x32, 0x74, 0x0c, 0xff, 0x25, 6, 0x18, 0x7e, 1}, 10},
		{"push first (the runtime's cudaLaunchKernel)", []byte{0x41, 0x56, 0x41, 0x55, 0x4d, 0x89, 0xce}, 0},
		{"push %rbp first", []byte{0x55, 0x48, 0x89, 0xe5}, 0},
		{"endbr64; push", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5}, 4},
		{"endbr64; nopl; push %r12", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x0f, 0x1f, 0x40, 0x00, 0x41, 0x54}, 8},
		{"test %rdi,%rdi; je rel32", []byte{0x48, 0x85, 0xff, 0x0f, 0x84, 1, 2, 3, 4}, 3},
		{"endbr64; jmp rel32", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0xe9, 1, 2, 3, 4}, 4},
		{"endbr64; mov: stays (mov writes a register)", []byte{0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x89, 0xf8}, 0},
		{"sub %rsp first: stays", []byte{0x48, 0x83, 0xec, 0x08, 0x55}, 0},
		{"cmp; jmp *table(%rip): an indirect jump is not emulated", []byte{0x48, 0x85, 0xff, 0xff, 0x25, 1, 2, 3, 4}, 0},
		{"push of memory is not emulated", []byte{0xff, 0x35, 1, 2, 3, 4}, 0},
		{"push of an immediate is not emulated", []byte{0x6a, 0x01}, 0},
		{"REX.W push is not emulated", []byte{0x48, 0x55}, 0},
		{"operand-size prefix on a branch is not emulated", []byte{0x48, 0x85, 0xff, 0x66, 0xe9, 1, 2}, 0},
		{"lock prefix: stays", []byte{0xf0, 0x48, 0x85, 0xff, 0x74, 2}, 0},
		{"flags-only instructions past the bound: stays", append(repeat([]byte{0x48, 0x85, 0xff}, 11), 0x74, 2), 0},
		{"cut short", []byte{0x81, 0x3d, 0x7e}, 0},
		{"nothing", nil, 0},
	} {
		if got := ProbeSite(c.code); got != c.want {
			t.Errorf("%s: site %d, want %d", c.name, got, c.want)
		}
	}
}

func repeat(b []byte, n int) []byte {
	var out []byte
	for range n {
		out = append(out, b...)
	}
	return out
}

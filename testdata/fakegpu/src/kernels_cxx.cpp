// kernels_cxx.cpp: C++ kernels of the fake GPU, in namespaces and templates
// so that their ELF names need demangling, as with real CUDA C++ kernels.
#include "kernels.h"

namespace fake {
namespace attention {
template <typename T>
__attribute__((noinline, visibility("default"))) void softmax_kernel(const uint64_t *p)
{
	fake_kernel_body(p);
}
template void softmax_kernel<float>(const uint64_t *);
template void softmax_kernel<double>(const uint64_t *);
} // namespace attention

namespace moe {
template <typename T, int TopK>
__attribute__((noinline, visibility("default"))) void topk_gating_kernel(const uint64_t *p)
{
	fake_kernel_body(p);
}
template void topk_gating_kernel<float, 2>(const uint64_t *);
} // namespace moe

struct Reducer {
	__attribute__((noinline, visibility("default"))) static void all_reduce_sum_kernel(const uint64_t *p)
	{
		fake_kernel_body(p);
	}
};
// emit the static member function
void (*const reducer_entry)(const uint64_t *) = &Reducer::all_reduce_sum_kernel;
} // namespace fake

// A C++ library shipped stripped, its symbols in a separate debug file.
namespace fake { namespace attention {
template <typename T> __attribute__((noinline)) T softmax_kernel(T *x, int n) { return x[n] * 2; }
template float softmax_kernel<float>(float *, int);
} }
extern "C" __attribute__((noinline)) int lib_stripped(int x) {
	float f[2] = {1, 2};
	return x + (int)fake::attention::softmax_kernel<float>(f, 1);
}

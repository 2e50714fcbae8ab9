// A library with symbol versions (like NVIDIA's libcudart).
__attribute__((noinline)) int lib_versioned(int x) { return x + 7; }

// C++ test target for collector/capture/native: namespaces, templates, a class
// method and std::thread, each thread blocked in a known call chain.
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <unistd.h>
#include <vector>

#define NOINLINE __attribute__((noinline, noclone))

namespace fake {
namespace attention {
std::mutex mu;
std::condition_variable cv;
bool never;

template <typename T> NOINLINE T softmax_kernel(T *x, int n) {
	std::unique_lock<std::mutex> lk(mu);
	cv.wait(lk, [] { return never; });
	return x[n];
}

class Runner {
  public:
	NOINLINE float run(int n) {
		std::vector<float> v(n + 1, 1.0f);
		return softmax_kernel<float>(v.data(), n);
	}
};
} // namespace attention

template <int N> NOINLINE int depth() { return depth<N - 1>() + 1; }
template <> NOINLINE int depth<0>() {
	for (;;)
		pause();
}
} // namespace fake

int main() {
	std::thread a([] { fake::attention::Runner().run(3); });
	std::thread b([] { fake::depth<4>(); });
	printf("ready %d\n", (int)getpid());
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof line, stdin)) {
	}
	_exit(0);
}

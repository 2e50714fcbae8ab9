"""A rank that is done with the GPU for a while: it syncs its work, leaves
one kernel unobserved (nobody waits for it), then sleeps and then burns
CPU, each for longer than the hang timeout. No hang may be reported.

    python3 idle.py LIB_DIR SECONDS
"""
import ctypes
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "testdata", "fakegpu"))
import run  # noqa: E402  (the testbed's device wrapper)

lib_dir, seconds = sys.argv[1], float(sys.argv[2])
dev = run.Device(lib_dir, "cuda")
stream = dev.stream()
for _ in range(20):
    dev.launch(dev.kernel("gemm_bf16_kernel"), 200, stream)
dev.check(dev.fn("StreamSynchronize", [ctypes.c_void_p])(stream), "StreamSynchronize")
dev.launch(dev.kernel("sgd_update_kernel"), 200, stream)  # never waited for
print("idle: GPU work done, sleeping", flush=True)
time.sleep(seconds)
print("idle: burning CPU", flush=True)
end = time.monotonic() + seconds
n = 0
while time.monotonic() < end:
    n += 1
print("idle: done", flush=True)

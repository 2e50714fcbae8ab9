"""A real PyTorch process (Debian's 1.13, CPU) whose worker thread waits
on an emulated GPU that never finishes: after a few training steps, a
thread calls the driver's cuCtxSynchronize_v2 through ctypes, from
internal/spinwait's libcuda.so.1 ($SPINWAIT_LIB), which spins forever
as the real driver does behind a kernel that never ends; the main thread
waits for it in join(). There is no GPU: what is real is torch's process
(its libraries, threads and interpreter) around a spinning wait."""

import ctypes
import os
import threading

import torch

driver = ctypes.CDLL(os.environ["SPINWAIT_LIB"])
model = torch.nn.Linear(64, 64)
opt = torch.optim.SGD(model.parameters(), lr=0.01)


def step():
    opt.zero_grad()
    model(torch.randn(32, 64)).sum().backward()
    opt.step()


def synchronize():
    driver.cuCtxSynchronize_v2()


for _ in range(5):
    step()
waiter = threading.Thread(target=synchronize, name="sync")
waiter.start()
print("ready", os.getpid(), flush=True)
waiter.join()

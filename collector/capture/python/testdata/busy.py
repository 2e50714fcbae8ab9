"""Keeps the interpreter's state changing as fast as it can: threads start
and end, recurse to varying depths, and run freshly compiled code, so a
reader racing with it sees torn state. Prints "ready" once running."""
import random
import sys
import threading


def recurse(n):
    if n == 0:
        fresh = compile("def f%d():\n    return sum(range(50))\n" % random.randrange(1 << 30), "<fresh>", "exec")
        ns = {}
        exec(fresh, ns)
        return next(iter(v for k, v in ns.items() if k.startswith("f")))()
    return recurse(n - 1)


def worker():
    for _ in range(200):
        recurse(random.randrange(1, 60))


def churn():
    while True:
        ts = [threading.Thread(target=worker) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()


threading.Thread(target=churn, daemon=True).start()
print("ready", flush=True)
while True:
    recurse(random.randrange(1, 100))

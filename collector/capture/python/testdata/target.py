"""Target of the python package's tests.

Builds threads blocked in known places (generators, an asyncio coroutine,
class and static methods, decorators, lambdas, 300-deep recursion, a ctypes
call, C (libc's qsort) calling back into Python through ctypes, a non-ASCII
function name), then writes OUT.json holding
faulthandler.dump_traceback(all_threads=True) and each thread's ident and
native id, and blocks.

Usage: target.py OUT [gil]
With "gil", a thread then blocks in pause() through ctypes.PyDLL, which
keeps the GIL, after writing OUT.json (with its native id) itself.
"""
import asyncio
import ctypes
import faulthandler
import functools
import json
import os
import sys
import tempfile
import threading
import time

out = sys.argv[1]
mode = sys.argv[2] if len(sys.argv) > 2 else ""
forever = threading.Event()
ready = []


def started():
    ev = threading.Event()
    ready.append(ev)
    return ev


def decorate(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)
    return wrapper


class Worker:
    def __init__(self, ev):
        self.ev = ev

    @decorate
    def method(self):
        return self.helper()

    @classmethod
    def klass(cls, ev):
        return cls(ev).method()

    def helper(self):
        self.ev.set()
        forever.wait()


def recurse(n, ev):
    if n == 0:
        ev.set()
        forever.wait()
        return 0
    return recurse(n - 1, ev) + 1


def gen(ev):
    yield 1
    ev.set()
    forever.wait()
    yield 2


def run_gen(ev):
    for _ in gen(ev):
        pass


async def leaf(ev):
    ev.set()
    forever.wait()


async def middle(ev):
    await leaf(ev)


def run_async(ev):
    asyncio.run(middle(ev))


def in_ctypes(ev):
    libc = ctypes.CDLL(None)
    ev.set()
    libc.pause()


def in_callback(ev):
    # qsort, C, calls compare, Python, which blocks: the Python frames
    # below and above the C frames are one thread's stack.
    libc = ctypes.CDLL(None)
    cmp_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))

    def compare(a, b):
        ev.set()
        forever.wait()
        return 0

    pair = (ctypes.c_int * 2)(2, 1)
    libc.qsort(pair, 2, ctypes.sizeof(ctypes.c_int), cmp_t(compare))


def grüße(ev):
    ev.set()
    forever.wait()


# A function whose name is a 2-byte-kind str, in a "file" whose name is a
# 4-byte-kind str.
exec(compile("def \u6570\u636e(wait, ev):\n    ev.set()\n    wait()\n", "/nonexistent/\U0001f600.py", "exec"))


def hold_gil(publish):
    libc = ctypes.PyDLL(None)
    publish()
    libc.pause()


def spawn(target, *args, name=None):
    ev = started()
    t = threading.Thread(target=target, args=args + (ev,), name=name, daemon=True)
    t.start()
    return t


spawn(Worker.klass, name="klass")
spawn(recurse, 300, name="recurse")
spawn(run_gen, name="gen")
spawn(run_async, name="async")
spawn(in_ctypes, name="ctypes")
spawn(in_callback, name="callback")
spawn(grüße, name="unicode")
spawn(globals()["\u6570\u636e"], forever.wait, name="cjk")
spawn(lambda ev: (ev.set(), forever.wait()), name="lambda")
for ev in ready:
    ev.wait()
# Every worker has set its event and is at most a few bytecodes away from
# blocking; give them the GIL to get there.
time.sleep(0.3)
ids = {str(t.ident): t.native_id for t in threading.enumerate()}
with tempfile.TemporaryFile("w+") as tb:
    faulthandler.dump_traceback(tb, all_threads=True)
    tb.seek(0)
    trace = tb.read()
tmp = out + ".tmp"
with open(tmp, "w") as f:
    json.dump({"traceback": trace, "ids": ids, "main_native_id": threading.get_native_id()}, f)
if mode == "gil":
    # The holder keeps the GIL from pause() on, so it writes the state
    # itself, holding the GIL already.
    def publish():
        with open(tmp) as f:
            d = json.load(f)
        d["gil_native_id"] = threading.get_native_id()
        with open(tmp, "w") as f:
            json.dump(d, f)
        os.rename(tmp, out)

    threading.Thread(target=hold_gil, args=(publish,), name="gil", daemon=True).start()
else:
    os.rename(tmp, out)
forever.wait()

"""Target of the dump package's tests: the main thread sleeps in
inner() <- outer(), a second thread named "waiter" waits on an event in
wait_here() <- worker(). Prints "ready PID" once both are in place."""
import os
import sys
import threading
import time

started = threading.Event()


def wait_here(ev):
    started.set()
    ev.wait()


def worker():
    wait_here(threading.Event())


def inner():
    print("ready", os.getpid(), flush=True)
    time.sleep(1000)


def outer():
    inner()


threading.Thread(target=worker, name="waiter", daemon=True).start()
started.wait()
outer()

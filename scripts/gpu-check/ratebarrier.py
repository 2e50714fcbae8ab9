"""The barrier of gpu-check's rate8 (workloads.py and fakeworkloads.py
launchbound): with RATE_DIR set, a workload says it is warm (a file
ready.PID there) and waits for the file go, so that the timed launches of
several workloads run together and the launcher's CPU is read over them
alone. Without RATE_DIR it returns at once."""
import os
import time


def wait():
    d = os.environ.get("RATE_DIR")
    if not d:
        return
    open(os.path.join(d, "ready.%d" % os.getpid()), "w").close()
    while not os.path.exists(os.path.join(d, "go")):
        time.sleep(0.001)

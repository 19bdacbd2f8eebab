#!/usr/bin/env python3
"""A torchrun-like launcher for gpuguard's relaunch-latency benchmark:
launch.py N PROGRAM ARGS... starts N copies of PROGRAM, each in a session of
its own (as torchrun's workers are) with RANK, LOCAL_RANK and WORLD_SIZE
set, prefixes their output lines with "[rankR]:" (torchrun's --tee style)
and waits for all of them, as a launcher whose ranks hang in a collective
does. It exits with the first non-zero status of a rank (128+signal for a
rank killed by a signal), else 0. By default it passes no signal on and
SIGTERM ends it at once, so gpuguard must find the ranks through /proc to
stop them. With --forward as the first argument it behaves as torchrun's
agent on SIGTERM: it sends SIGTERM to every rank, waits for them, and exits
143.
"""
import os
import signal
import subprocess
import sys
import threading

forward = sys.argv[1] == "--forward"
if forward:
    del sys.argv[1]
n = int(sys.argv[1])
argv = sys.argv[2:]
lock = threading.Lock()
terminated = False


def relay(rank, src, dst):
    for line in iter(src.readline, b""):
        with lock:
            dst.write(f"[rank{rank}]:".encode() + line)
            dst.flush()


procs, threads = [], []
for r in range(n):
    env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n))
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    procs.append(p)
    for src, dst in ((p.stdout, sys.stdout.buffer), (p.stderr, sys.stderr.buffer)):
        t = threading.Thread(target=relay, args=(r, src, dst), daemon=True)
        t.start()
        threads.append(t)


def on_term(signum, frame):
    global terminated
    terminated = True
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)


if forward:
    signal.signal(signal.SIGTERM, on_term)
status = 0
for p in procs:
    code = p.wait()
    if code < 0:
        code = 128 - code
    if code and not status:
        status = code
for t in threads:
    t.join()
sys.exit(143 if terminated else status)

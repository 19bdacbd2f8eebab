#!/usr/bin/env python3
"""A torchrun-like launcher for gpuguard's multi-node tests, one per node
under srun (srun -N2 --ntasks-per-node=1 --label python3 mnlaunch.py
--nproc-per-node N PROGRAM ARGS...).

It starts N copies of PROGRAM, each in a session of its own (as torchrun's
workers are), with RANK = node rank (SLURM_NODEID) * N + local rank,
LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE and GROUP_RANK set, and lets them
write to its own stdout and stderr (torchrun's default: no --tee). When a
worker exits with a non-zero status it does what torchrun's agent does with
no restarts left: it logs the failure, stops the other workers (SIGTERM,
then SIGKILL after --stop-timeout seconds), prints the ChildFailedError
summary naming the first failure's global rank, local rank, host and exit
code, and exits 1. Workers that never fail are waited for: on a node whose
workers hang in a collective, the launcher waits with them.
"""
import argparse
import datetime
import os
import signal
import socket
import subprocess
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--nproc-per-node", type=int, required=True)
p.add_argument("--stop-timeout", type=float, default=1.0)
p.add_argument("argv", nargs=argparse.REMAINDER)
a = p.parse_args()

node_rank = int(os.environ.get("SLURM_NODEID", "0"))
nnodes = int(os.environ.get("SLURM_NNODES", "1"))
n = a.nproc_per_node
procs = []
for local in range(n):
    env = dict(os.environ, RANK=str(node_rank * n + local), LOCAL_RANK=str(local),
               WORLD_SIZE=str(nnodes * n), LOCAL_WORLD_SIZE=str(n), GROUP_RANK=str(node_rank))
    procs.append(subprocess.Popen(a.argv, env=env, start_new_session=True))

failed = None
while failed is None:
    running = False
    for local, proc in enumerate(procs):
        code = proc.poll()
        if code is None:
            running = True
        elif code != 0 and failed is None:
            failed = (local, code, proc.pid, time.time())
    if not running:
        break
    time.sleep(0.05)

if failed is None:
    sys.exit(0)

local, code, pid, when = failed
sys.stderr.write(
    f"ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: {code}) local_rank: {local} "
    f"(pid: {pid}) of binary: {sys.executable}\n")
sys.stderr.flush()
for proc in procs:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
deadline = time.time() + a.stop_timeout
while time.time() < deadline and any(proc.poll() is None for proc in procs):
    time.sleep(0.05)
for proc in procs:
    if proc.poll() is None:
        proc.kill()
        proc.wait()
entry = next((x for x in a.argv if x.endswith(".py")), a.argv[0] if a.argv else "?")
stamp = datetime.datetime.fromtimestamp(when).strftime("%Y-%m-%d_%H:%M:%S")
sys.stderr.write(
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
    "============================================================\n"
    f"{entry} FAILED\n"
    "------------------------------------------------------------\n"
    "Failures:\n"
    "  <NO_OTHER_FAILURES>\n"
    "------------------------------------------------------------\n"
    "Root Cause (first observed failure):\n"
    "[0]:\n"
    f"  time      : {stamp}\n"
    f"  host      : {socket.gethostname()}\n"
    f"  rank      : {node_rank * n + local} (local_rank: {local})\n"
    f"  exitcode  : {code} (pid: {pid})\n"
    "  error_file: <N/A>\n"
    "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
    "============================================================\n")
sys.stderr.flush()
sys.exit(1)

#!/usr/bin/env python3
"""A data-parallel job of several ranks on several nodes, for gpuguard's
multi-node Slurm tests (run with srun -N2 --label, or by mnlaunch.py).

Every rank prints "rank R on HOST launched at T batch=B step=S restart=C"
(T: time.time(); S: the Slurm step; C: SLURM_RESTART_COUNT), then "step N/M"
lines. With --batch above 32, the last rank (on the last node) dies the way
PyTorch does when CUDA runs out of memory (a traceback and the message on
stderr, exit 1; each line begins with "[rankR]: " when a launcher started
it, RANK set, as PyTorch's workers print an uncaught exception), once every
other rank waits in the "collective": they print "rank R waits in
all_reduce", ignore SIGTERM and block until they are killed (with
MNRANKS_HANG_TERM=default they keep SIGTERM's default action, as a process
blocked in NCCL without a Python handler does). With --batch 32 or less every rank finishes and
prints "rank R on HOST done batch=B"; with --hold, a rank of a job's first
run (no SLURM_RESTART_COUNT) keeps training instead of finishing, until it
is stopped (the job is then requeued).

Each rank records itself in ranks/ (a directory of the job's working
directory, which every node shares): "PID STARTTIME HOST KEY" in
ranks/KEY-rankR.pid, KEY = r<restart>-s<step>. At its start, a rank looks at
the records of earlier steps on its own host and prints whether those
processes are gone ("rank R on HOST: earlier ranks on this node: N gone") or
still running ("... still running: PIDS"); a process is the same one when its
start time in /proc/PID/stat matches, and a zombie counts as gone.
"""
import argparse
import glob
import os
import signal
import socket
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, required=True)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--hold", action="store_true")
a = p.parse_args()

rank = int(os.environ.get("RANK") or os.environ["SLURM_PROCID"])
world = int(os.environ.get("WORLD_SIZE") or os.environ.get("SLURM_NTASKS") or 1)
host = socket.gethostname()
step_id = os.environ.get("SLURM_STEP_ID", "x")
restart = os.environ.get("SLURM_RESTART_COUNT", "0")
key = f"r{restart}-s{step_id}"
os.makedirs("ranks", exist_ok=True)


def say(line):
    """One line to stdout in one write (gpuguard's jobs run unbuffered, and
    under a launcher the ranks of a node share one stdout)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def stat_fields(pid):
    """/proc/PID/stat's fields after the command name, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()


me = stat_fields(os.getpid())
start_time = me[19]  # field 22 of /proc/PID/stat

alive, gone = [], 0
for rec in sorted(glob.glob("ranks/*.pid")):
    try:
        with open(rec) as f:
            pid, st, rec_host, rec_key = f.read().split()
    except (OSError, ValueError):
        continue
    if rec_host != host or rec_key == key:
        continue
    fields = stat_fields(pid)
    if fields is not None and fields[0] != "Z" and fields[19] == st:
        alive.append(pid)
    else:
        gone += 1
if alive:
    say(f"rank {rank} on {host}: earlier ranks on this node still running: {' '.join(alive)}")
elif gone:
    say(f"rank {rank} on {host}: earlier ranks on this node: {gone} gone")
tmp = f"ranks/.{key}-rank{rank}.tmp"
with open(tmp, "w") as f:
    f.write(f"{os.getpid()} {start_time} {host} {key}\n")
os.rename(tmp, f"ranks/{key}-rank{rank}.pid")

say(f"rank {rank} on {host} launched at {time.time():.6f} batch={a.batch} step={step_id} restart={restart}")


def waiting_marker(r):
    return f"ranks/{key}-rank{r}.waits"


step = 0
while True:
    step += 1
    if step > a.steps and not (a.hold and restart == "0"):
        break
    say(f"step {step}/{a.steps} loss={1.0 / step:.4f}")
    if step == 5 and a.batch > 32:
        if rank == world - 1:
            # the others are in the collective first
            deadline = time.time() + 60
            while time.time() < deadline and not all(os.path.exists(waiting_marker(r)) for r in range(world - 1)):
                time.sleep(0.01)
            say(f"rank {rank} oom at {time.time():.6f}")
            # Under a torch launcher (RANK set), PyTorch's workers put their
            # global rank before each line of an uncaught exception.
            pre = f"[rank{rank}]: " if os.environ.get("RANK") else ""
            sys.stderr.write(
                f"{pre}Traceback (most recent call last):\n"
                f'{pre}  File "/opt/job/mnranks.py", line 97, in <module>\n'
                f"{pre}    logits = model(batch)\n"
                f"{pre}torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. "
                "GPU 0 has a total capacity of 79.25 GiB of which 1.12 GiB is free. "
                "Including non-PyTorch memory, this process has 78.11 GiB memory in use. "
                "Of the allocated memory 76.40 GiB is allocated by PyTorch, and 1.02 GiB "
                "is reserved by PyTorch but unallocated. If reserved but unallocated memory "
                "is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
                "fragmentation.  See documentation for Memory Management  "
                "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)\n")
            sys.stderr.flush()
            sys.exit(1)
        if os.environ.get("MNRANKS_HANG_TERM") != "default":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        say(f"rank {rank} waits in all_reduce")
        open(waiting_marker(rank), "w").close()
        while True:
            time.sleep(3600)
    if a.hold and restart == "0" and step == a.steps:
        say(f"rank {rank} on {host} holds at batch={a.batch}")
    time.sleep(0.02 if step <= a.steps else 0.2)
say(f"rank {rank} on {host} done batch={a.batch}")

#!/usr/bin/env python3
"""A two-rank job for gpuguard's Slurm tests (run with srun -n2 --label) and
its relaunch-latency benchmark (also run by launch.py, which sets RANK).

Every rank prints "step N/20 loss=..." lines. With --batch above 32, rank 1
dies the way PyTorch does when CUDA runs out of memory (the message on
stderr, exit 1), while rank 0 hangs as a rank does in a collective that its
peer never joins: it ignores SIGTERM and waits to be killed (with
RANKS_HANG_TERM=default it keeps SIGTERM's default action, as a process
blocked in NCCL without a Python handler does). With --batch 32
or less, both ranks finish and exit 0.

Each rank prints "rank R launched at T" first, and rank 1 prints "rank 1 oom
at T" just before its out-of-memory message (T: time.time()), so that the
test can see how long the relaunch took. Rank 1 runs out of memory only
once rank 0 waits (file rank0-waits-JOBID-batchN in the working directory),
as in a real job where the healthy rank sits in the collective.
"""
import argparse
import os
import signal
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, required=True)
a = p.parse_args()
rank = int(os.environ.get("SLURM_PROCID") or os.environ["RANK"])
print(f"rank {rank} launched at {time.time():.6f} batch={a.batch} step={os.environ.get('SLURM_STEP_ID')}", flush=True)
world = int(os.environ.get("SLURM_NTASKS") or os.environ.get("WORLD_SIZE") or 1)
# rank 0 creates it when it waits in the "collective"
marker = f"rank0-waits-{os.environ.get('SLURM_JOB_ID', 'local')}-batch{a.batch}"
for step in range(1, 21):
    print(f"step {step}/20 loss={1.0 / step:.3f}", flush=True)
    if step == 5 and a.batch > 32:
        if rank == 1:
            # Rank 0 reaches the collective first and has printed all its
            # lines (see below); the oom_grace stop in gpuguard counts steps
            # printed after the OOM line as training going on.
            deadline = time.time() + (60 if world > 1 else 0)
            while not os.path.exists(marker) and time.time() < deadline:
                time.sleep(0.01)
            print(f"rank 1 oom at {time.time():.6f}", flush=True)
            sys.stderr.write(
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
                "GPU 1 has a total capacity of 15.77 GiB of which 1.02 GiB is free. "
                "Including non-PyTorch memory, this process has 14.74 GiB memory in use. "
                "Of the allocated memory 13.10 GiB is allocated by PyTorch, and 200.00 MiB "
                "is reserved by PyTorch but unallocated.\n")
            sys.stderr.flush()
            sys.exit(1)
        if os.environ.get("RANKS_HANG_TERM") != "default":
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("rank 0 waits in all_reduce for rank 1", flush=True)
        open(marker, "w").close()
        while True:
            time.sleep(3600)
    time.sleep(0.02)
print(f"rank {rank} done", flush=True)

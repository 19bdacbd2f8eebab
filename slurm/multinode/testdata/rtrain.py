"""A data-parallel job on real torch.distributed (gloo, on the CPU) for
TestMultiNodeRealTorchrunOOMOnTheSecondNode, started by real torchrun
(python3 -m torch.distributed.run), two ranks per node on two nodes.

Every rank prints "rank R of W on HOST start batch=B accum=A at T" (T:
time.time()), then all-reduces a tensor once per step and prints
"rank R step N/M sum=S"; at the end "rank R on HOST done batch=B accum=A".
With --batch above --limit (32) the last rank, which the c10d rendezvous puts
on the last node (its agents are ordered by host name), raises at step 3 the
out-of-memory error PyTorch 1.13 raises when CUDA runs out (its template,
figures of our own; there is no GPU), while the others already wait for it
in their all_reduce.

Two things make gloo's ranks wait as NCCL's do. gloo notices a peer's end
at once (its sockets close: "Connection closed by peer") where NCCL's ranks
wait for their timeout; here the failed rank's process lingers after its
traceback, its gloo sockets open, because Python's exit waits for the
rank's non-daemon metrics thread, which only the end of training stops (a
real way for a failed rank to hang). And every rank handles SIGTERM as
jobs do to checkpoint on preemption: the handler only notes it, and runs
once the rank's collective returns, so a rank blocked in all_reduce lives on
until SIGKILL (torchrun's agent and gpuguard send it after their grace). So
the ranks of one node do not see the other's end before their own
gpuguard stops them.
"""
import argparse
import os
import queue
import signal
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, required=True)
p.add_argument("--accum", type=int, required=True)
p.add_argument("--steps", type=int, default=5)
p.add_argument("--limit", type=int, default=32)
a = p.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
host = socket.gethostname()


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def on_term(signum, frame):
    say(f"rank {rank}: SIGTERM: checkpointing at the next step")


signal.signal(signal.SIGTERM, on_term)

metrics = queue.Queue()


def write_metrics():
    while metrics.get() is not None:
        pass


writer = threading.Thread(target=write_metrics, name="metrics")  # not a daemon
writer.start()

say(f"rank {rank} of {world} on {host} start batch={a.batch} accum={a.accum} at {time.time():.6f}")
for step in range(1, a.steps + 1):
    if a.batch > a.limit and step == 3 and rank == world - 1:
        raise torch.cuda.OutOfMemoryError(
            "CUDA out of memory. Tried to allocate 2.50 GiB (GPU 1; 39.39 GiB total capacity; "
            "35.12 GiB already allocated; 1.96 GiB free; 36.40 GiB reserved in total by PyTorch) "
            "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
            "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
    x = torch.ones(1)
    dist.all_reduce(x)
    metrics.put((step, x.item()))
    say(f"rank {rank} step {step}/{a.steps} sum={x.item():.0f}")
metrics.put(None)
writer.join()
say(f"rank {rank} on {host} done batch={a.batch} accum={a.accum}")
dist.destroy_process_group()

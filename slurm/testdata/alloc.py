#!/usr/bin/env python3
"""Allocate and touch --mb MiB of host memory, hold it briefly, exit 0.

Under a Slurm memory limit (--mem, cgroup mode) a size above the limit gets
the process killed by the cgroup's out-of-memory killer.
"""
import argparse
import time

p = argparse.ArgumentParser()
p.add_argument("--mb", type=int, required=True)
a = p.parse_args()
print(f"allocating {a.mb} MiB", flush=True)
block = bytearray(a.mb << 20)
for i in range(0, len(block), 4096):
    block[i] = 1
print(f"holding {a.mb} MiB", flush=True)
time.sleep(0.2)
print("done", flush=True)

#!/usr/bin/env python3
"""Writes run-oom/: the record of a realistic three-attempt run, as the
supervisor and the sampler write it. Regenerate with `python3 gen_fixture.py`
(deterministic). The story:

  attempt 1: DDP on 2 A100-40GB, batch 32, val crop 1024. Training sits at
    ~27 GiB; validation peaks higher each epoch and OOMs on gpu0 in epoch 3.
    Policy: relaunch from the epoch-2 checkpoint with val_crop_size 768.
  attempt 2: validation fits (peak 37.9 GiB, within 5%: a warning); host
    memory grows with 8 DataLoader workers until the cgroup (64 GiB) kills a
    worker. Policy: relaunch with workers 4.
  attempt 3: runs to the end; exit 0.
"""
import json, math, os
from datetime import datetime, timedelta, timezone

GiB = 1 << 30
T0 = datetime(2026, 3, 1, 9, 0, 0, tzinfo=timezone.utc)
CAP = 40 * GiB
CG_LIMIT = 64 * GiB
RAM = 503 * GiB
HEADER = "elapsed_ms,attempt,phase,device,used_bytes,limit_bytes,job_bytes"

rows, events = [], []

def ts(ms):
    return (T0 + timedelta(milliseconds=ms)).isoformat(timespec="microseconds").replace("+00:00", "Z")

def ev(ms, typ, **kw):
    d = {"time": ts(ms), "type": typ}
    d.update(kw)
    events.append(d)

def sample(ms, attempt, phase, g0, g1, host, cg, ram, job0=None, job1=None):
    def r(dev, used, lim, job=None):
        rows.append(f"{ms},{attempt},{phase},{dev},{int(used)},{int(lim)},{'' if job is None else int(job)}")
    r("gpu0", g0, CAP, job0)
    r("gpu1", g1, CAP, job1)
    r("host", host, CG_LIMIT)
    r("cgroup", cg, CG_LIMIT)
    r("ram", ram, RAM)

def wobble(ms, amp):
    return amp * math.sin(ms / 7000.0)

summaries = {}

def attempt(n, start, epochs, val_peaks, host_growth, workers, end_kind, train_used=27.0):
    """Simulates one attempt; returns (end_ms, phase at end)."""
    ms = start
    peaks = {}
    def peak(phase, dev, used, lim, at):
        p = peaks.setdefault(phase, {})
        if dev not in p or used > p[dev][0]:
            p[dev] = (used, lim, at)
    host = 6 * GiB
    for ep in range(epochs):
        ev(ms, "phase", attempt=n, phase="train", line=100 + ep * 400, step=ep * 1000)
        train_end = ms + 150_000
        while ms < train_end:
            g0 = (train_used + wobble(ms, 0.3)) * GiB
            g1 = (train_used - 0.4 + wobble(ms + 900, 0.3)) * GiB
            if end_kind == "host_oom" and host + host_growth + 3 * GiB > CG_LIMIT * 0.995:
                return ms - 5000, peaks, "train", ep  # the kernel kills a worker before the next sample
            host += host_growth
            cg = host + 3 * GiB
            sample(ms, n, "train", g0, g1, host, cg, cg + 40 * GiB, g0 - 0.6 * GiB, g1 - 0.6 * GiB)
            for dev, u, lim in (("gpu0", g0, CAP), ("gpu1", g1, CAP), ("host", host, CG_LIMIT)):
                peak("train", dev, u, lim, ms)
            ms += 5000
        # validation, sampled faster (2.5 Hz here, to keep the fixture small)
        ev(ms, "phase", attempt=n, phase="val", line=300 + ep * 400, step=ep * 1000 + 999)
        vpeak = val_peaks[ep]
        val_end = ms + 40_000
        t = 0
        while ms < val_end:
            frac = math.sin(math.pi * t / 40_000)
            g0 = (train_used + (vpeak - train_used) * frac ** 3) * GiB
            g1 = (train_used - 0.4 + (vpeak - 1.1 - train_used) * frac ** 3) * GiB
            host = min(host + host_growth / 25, CG_LIMIT * 0.99 - 3 * GiB)
            cg = host + 3 * GiB
            sample(ms, n, "val", g0, g1, host, cg, cg + 40 * GiB, g0 - 0.6 * GiB, g1 - 0.6 * GiB)
            for dev, u, lim in (("gpu0", g0, CAP), ("gpu1", g1, CAP), ("host", host, CG_LIMIT)):
                peak("val", dev, u, lim, ms)
            if end_kind == "gpu_oom" and ep == epochs - 1 and g0 >= vpeak * GiB * 0.999:
                return ms, peaks, "val", ep
            ms += 400
            t += 400
    return ms, peaks, "train", epochs - 1

def summary(n, start, end, peaks, workers, samples):
    phases = []
    for ph in ("train", "val"):
        if ph not in peaks:
            continue
        p = peaks[ph]
        gpu = []
        for dev in ("gpu0", "gpu1"):
            u, lim, at = p[dev]
            gpu.append({"id": dev, "uuid": f"GPU-5f1c2a4e-0000-4000-8000-00000000000{dev[-1]}", "peak_bytes": int(u),
                        "capacity_bytes": lim, "headroom_bytes": int(lim - u), "peak_ms": at, "peak_job_bytes": int(u - 0.6 * GiB)})
        hu, hl, hat = p["host"]
        phases.append({"phase": ph, "samples": samples.get(ph, 0), "gpu": gpu,
                       "peak_fraction": max(g["peak_bytes"] / g["capacity_bytes"] for g in gpu),
                       "host_peak_bytes": int(hu), "host_limit_bytes": hl, "host_peak_ms": hat,
                       "host_peak_fraction": hu / hl, "cgroup_peak_bytes": int(hu + 3 * GiB), "cgroup_limit_bytes": CG_LIMIT,
                       "ram_peak_bytes": int(hu + 43 * GiB), "ram_total_bytes": RAM, "max_workers": workers})
    return {"attempt": n, "origin": ts(0), "samples": sum(samples.values()), "first_ms": start, "last_ms": end,
            "devices": [{"id": f"gpu{i}", "index": i, "uuid": f"GPU-5f1c2a4e-0000-4000-8000-00000000000{i}",
                         "name": "NVIDIA A100-SXM4-40GB", "cuda_ordinal": i, "total_bytes": CAP} for i in (0, 1)],
            "phases": phases}

def count(attempt_n):
    c = {}
    seen = set()
    for r in rows:
        f = r.split(",")
        if int(f[1]) == attempt_n and f[0] not in seen:
            seen.add(f[0])
            c[f[2]] = c.get(f[2], 0) + 1
    return c

argv = ["torchrun", "--nproc-per-node=2", "train.py", "--config", "configs/seg.yaml", "--batch-size", "32"]
ev(0, "run_start", run_dir="/home/user/proj/.gpuguard/runs/20260301-090000-1a2b3c", argv=argv,
   policy="gpuguard.yaml", version="0.1.0")

# Attempt 1: validation OOM in epoch 3.
ev(200, "attempt_start", attempt=1, argv=argv + ["DATA.VAL_CROP_SIZE=1024"],
   env_changes=["PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"],
   knobs={"batch_size": 32, "val_crop_size": 1024, "workers": 8}, checkpoint=None)
end1, peaks1, ph1, ep1 = attempt(1, 1000, 3, [33.0, 36.5, 40.0], 5 * 1024 ** 2, 8, "gpu_oom")
oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.25 GiB. GPU 0 has a total capacity of 39.39 GiB "
       "of which 1.12 GiB is free. Including non-PyTorch memory, this process has 38.26 GiB memory in use. Of the allocated "
       "memory 35.02 GiB is allocated by PyTorch, and 2.61 GiB is reserved by PyTorch but unallocated.")
ev(end1 + 50, "failure", attempt=1, kind="gpu_oom", line=1507, text="[rank0]: " + oom)
ev(end1 + 900, "memory", attempt=1, summary=summary(1, 1000, end1, peaks1, 8, count(1)))
verdict1 = {"kind": "gpu_oom", "reason": "CUDA out of memory", "phase": "val", "rank": 0, "line": 1507,
            "text": "[rank0]: " + oom[:120], "step": 2999, "epoch": 2,
            "oom": {"format": "modern", "exception": "torch.OutOfMemoryError", "requested_bytes": int(2.25 * GiB),
                    "total_bytes": int(39.39 * GiB), "free_bytes": int(1.12 * GiB), "in_use_bytes": int(38.26 * GiB),
                    "allocated_bytes": int(35.02 * GiB), "reserved_unallocated_bytes": int(2.61 * GiB),
                    "reserved_total_bytes": None, "device": "GPU 0"},
            "fragmentation": False, "other_processes": False, "phases": [{"line": 1100, "phase": "train"}, {"line": 1300, "phase": "val"}],
            "diagnosis": "Validation needs more memory than training: the validation crop (1024) is larger than the training crop.",
            "suggestions": ["lower val_crop_size", "validate with a smaller batch"]}
ev(end1 + 1000, "attempt_end", attempt=1, exit_code=1, duration_s=(end1 + 1000 - 200) / 1000, verdict=verdict1, last_step=2999)
ev(end1 + 1100, "decision", attempt=1, verb="relaunch", rule="val-oom", step=1,
   changes=[{"name": "val_crop_size", "old": 1024, "new": 768}], backoff_s=5,
   reason="gpu_oom in val: validation peak 40.0 GiB of 40.0 GiB", checkpoint="outputs/ckpt/epoch_002.pt")

# Attempt 2: host memory grows until the cgroup kills a DataLoader worker.
s2 = end1 + 8000
ev(s2, "attempt_start", attempt=2, argv=argv + ["DATA.VAL_CROP_SIZE=768"],
   env_changes=["PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"],
   knobs={"batch_size": 32, "val_crop_size": 768, "workers": 8}, checkpoint="outputs/ckpt/epoch_002.pt")
ev(s2 + 90000, "warning", attempt=2, message="validation uses 37.90 GiB of 40.00 GiB on gpu0 (94.8%): within 5% of capacity; a larger validation batch or input will not fit")
end2, peaks2, ph2, ep2 = attempt(2, s2 + 800, 4, [37.9, 37.9, 37.9, 37.9], 550 * 1024 ** 2, 8, "host_oom")
ev(end2 - 30000, "warning", attempt=2, message="host memory at 57.80 GiB of 64.00 GiB (90% of the memory cgroup's limit (the job's real ceiling under Slurm or a container)); the job's processes hold 54.80 GiB across 8 DataLoader-like workers; fewer workers or a smaller prefetch_factor would relieve it")
ev(end2 + 100, "failure", attempt=2, kind="host_oom", line=2210,
   text="RuntimeError: DataLoader worker (pid 48213) is killed by signal: Killed. ")
ev(end2 + 900, "memory", attempt=2, summary=summary(2, s2 + 800, end2, peaks2, 8, count(2)))
verdict2 = {"kind": "host_oom", "reason": "DataLoader worker killed", "phase": "train", "rank": None, "line": 2210,
            "text": "RuntimeError: DataLoader worker (pid 48213) is killed by signal: Killed.", "step": 4120, "epoch": 3,
            "oom": None, "fragmentation": False, "other_processes": False, "phases": [],
            "diagnosis": "The kernel killed a DataLoader worker: host memory (the cgroup's 64 GiB) ran out.",
            "suggestions": ["fewer DataLoader workers", "smaller prefetch_factor"]}
ev(end2 + 1000, "attempt_end", attempt=2, exit_code=1, duration_s=(end2 + 1000 - s2) / 1000, verdict=verdict2, last_step=4120)
ev(end2 + 1100, "decision", attempt=2, verb="relaunch", rule="host-oom", step=1,
   changes=[{"name": "workers", "old": 8, "new": 4}], backoff_s=5,
   reason="host_oom: cgroup oom_kill rose by 1", checkpoint="outputs/ckpt/epoch_003.pt")

# Attempt 3: runs to the end.
s3 = end2 + 8000
ev(s3, "attempt_start", attempt=3, argv=argv + ["DATA.VAL_CROP_SIZE=768"],
   env_changes=["PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"],
   knobs={"batch_size": 32, "val_crop_size": 768, "workers": 4}, checkpoint="outputs/ckpt/epoch_003.pt")
end3, peaks3, _, _ = attempt(3, s3 + 800, 2, [37.9, 37.9], 3 * 1024 ** 2, 4, "done")
# No memory event for attempt 3: report falls back to the timeline.
ev(end3 + 1000, "attempt_end", attempt=3, exit_code=0, duration_s=(end3 + 1000 - s3) / 1000,
   verdict={"kind": "none", "phase": "train", "rank": None, "line": 0, "step": 5999, "epoch": 5, "oom": None,
            "fragmentation": False, "other_processes": False, "phases": [], "diagnosis": "", "suggestions": []}, last_step=5999)
ev(end3 + 1100, "decision", attempt=3, verb="done", reason="the job exited 0")
ev(end3 + 1200, "run_end", exit_code=0, attempts=3)

os.makedirs("run-oom", exist_ok=True)
with open("run-oom/events.jsonl", "w") as f:
    for e in events:
        f.write(json.dumps(e, separators=(",", ":")) + "\n")
with open("run-oom/timeline.csv", "w") as f:
    f.write(HEADER + "\n")
    for r in rows:
        f.write(r + "\n")
with open("run-oom/state.json", "w") as f:
    json.dump({"attempt": 3, "knobs": {"batch_size": 32, "val_crop_size": 768, "workers": 4}}, f, indent=2)
    f.write("\n")
print(len(rows), "timeline rows,", len(events), "events")

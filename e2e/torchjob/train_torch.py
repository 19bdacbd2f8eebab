#!/usr/bin/python3
"""Train a small conv net on synthetic images with real PyTorch on the CPU.

This is gpuguard's end-to-end test job (docs/e2e.md). It behaves like a
typical research training script: a YAML config with command-line and
environment overrides, a real torch.utils.data.DataLoader with worker
processes, progressive resizing of the training crops, periodic checkpoints,
validation, and resume from a checkpoint. Under a memory limit it runs out of
memory for real, the way real jobs do:

  * validation at full resolution (data.val_crop_size null) makes PyTorch's
    CPU allocator fail under an address-space limit: "DefaultCPUAllocator:
    can't allocate memory", during validation;
  * a batch that is too large fails the same way in training, at the first
    step after the warm-up at small crops;
  * DataLoader workers that each cache preprocessed crops in RAM
    (data.cache_samples) exceed a memory cgroup's limit when there are too
    many of them, once the loader is rebuilt for the full training crops
    after the warm-up; the kernel kills one, and the DataLoader reports
    "DataLoader worker (pid N) is killed by signal: Killed."

Output contract (tests and gpuguard read these lines):
  effective batch E (batch_size B x grad_accum A)
  resumed from PATH at step N          (with --resume; training continues at N+1)
  gpuguard: phase=train
  step S/T loss=L crop=C               (once per trained step)
  saved checkpoint PATH                (after the atomic rename)
  gpuguard: phase=val
  Validating at step S: ...
  val step=S loss=L acc=A
  training finished at step T: ...

Exit status: 0 when training finished; 1 on an uncaught error (Python's
traceback, e.g. the allocator's RuntimeError); 2 for bad usage or config.

Checkpoints are step_<N>.pt in the output directory, written to a temporary
file in the same directory, fsynced, then renamed into place, so a file named
step_<N>.pt is always complete. Resume never trains a step twice: a run
resumed from step_<N>.pt starts at step N+1, with the batch sequence an
uninterrupted run would have seen from there.
"""

import argparse
import functools
import multiprocessing
import os
import random
import resource
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml
from torch.utils.data import DataLoader, Dataset


def die(msg):
    """Report a usage or configuration error and exit with status 2."""
    print(f"train_torch.py: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


# ---------------------------------------------------------------- config

def parse_args(argv):
    p = argparse.ArgumentParser(description="Train a small conv net on synthetic images (gpuguard e2e job).")
    p.add_argument("--config", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "config.yaml"),
                   help="YAML config file (default: config.yaml next to this script)")
    p.add_argument("--batch-size", type=int, help="override train.batch_size")
    p.add_argument("--grad-accum", type=int, help="override train.grad_accum")
    p.add_argument("--workers", type=int, help="override train.workers (DataLoader worker processes)")
    p.add_argument("--steps", type=int, help="override train.steps")
    p.add_argument("--output-dir", help="override output_dir (checkpoints go here)")
    p.add_argument("--device", default="cpu", help="cpu (the tests) or cuda[:N] (docs/gpu-validation.md)")
    p.add_argument("--gpu-memory-mib", type=int, metavar="MIB",
                   help="with --device cuda: cap PyTorch's allocator at MIB, so that the sizes of the CPU "
                        "scenarios run out of CUDA memory the same way on a large GPU")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override any config key (dotted path; VALUE is parsed as YAML); repeatable")
    p.add_argument("--resume", metavar="PATH",
                   help="resume from this checkpoint file, or from the highest step_<N>.pt in this directory")
    return p.parse_args(argv)


def set_key(cfg, dotted, value, origin):
    node = cfg
    parts = dotted.split(".")
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            die(f"{origin}: {dotted}: {part} is not a section of the config")
        node = node[part]
    if parts[-1] not in node:
        die(f"{origin}: {dotted} is not a key of the config; check the spelling against config.yaml")
    node[parts[-1]] = value


def load_config(args):
    try:
        with open(args.config, encoding="utf-8") as f:
            cfg = yaml.safe_load(f)
    except OSError as e:
        die(f"cannot read config {args.config}: {e.strerror}")
    except yaml.YAMLError as e:
        die(f"config {args.config} is not valid YAML: {e}")
    if not isinstance(cfg, dict):
        die(f"config {args.config}: expected a mapping at the top level")
    for item in args.set:
        key, sep, raw = item.partition("=")
        if not sep:
            die(f"--set {item}: expected KEY=VALUE")
        set_key(cfg, key, yaml.safe_load(raw), f"--set {item}")
    for flag, key in (("batch_size", "train.batch_size"), ("grad_accum", "train.grad_accum"),
                      ("workers", "train.workers"), ("steps", "train.steps"), ("output_dir", "output_dir")):
        v = getattr(args, flag)
        if v is not None:
            set_key(cfg, key, v, "--" + flag.replace("_", "-"))
    env = os.environ.get("VAL_CROP_SIZE")
    if env is not None:
        if env.strip().lower() in ("", "null", "none", "full"):
            cfg["data"]["val_crop_size"] = None
        else:
            try:
                cfg["data"]["val_crop_size"] = int(env)
            except ValueError:
                die(f"VAL_CROP_SIZE={env!r}: expected a whole number of pixels, or null/none/full for full resolution")
    d, t = cfg["data"], cfg["train"]
    for section, key, low in ((t, "batch_size", 1), (t, "grad_accum", 1), (t, "workers", 0), (t, "steps", 1),
                              (t, "checkpoint_every", 1), (t, "val_every", 1), (d, "image_size", 8),
                              (d, "train_crop_size", 1), (d, "warmup_crop_size", 1), (d, "val_batch_size", 1),
                              (d, "train_size", 1), (d, "val_size", 1), (d, "cache_samples", 0)):
        v = section.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < low:
            die(f"config: {key} is {v!r}; it must be a whole number >= {low}")
    adj = d.get("worker_oom_score_adj")
    if not isinstance(adj, int) or isinstance(adj, bool) or not -1000 <= adj <= 1000:
        die(f"config: data.worker_oom_score_adj is {adj!r}; it must be a whole number from -1000 to 1000")
    vc = d["val_crop_size"]
    if vc is not None and (not isinstance(vc, int) or not 1 <= vc <= d["image_size"]):
        die(f"config: data.val_crop_size is {vc!r}; it must be null (full resolution) or 1..{d['image_size']}")
    for key in ("train_crop_size", "warmup_crop_size"):
        if d[key] > d["image_size"]:
            die(f"config: data.{key} {d[key]} is larger than data.image_size {d['image_size']}")
    return cfg


# ---------------------------------------------------------------- data

class SyntheticImages(Dataset):
    """Images generated from the seed: a class-dependent stripe pattern plus noise.

    Indexes are keys from StepBatches: (image index, crop side, crop y, crop
    x); an item is that crop of the image, normalised to float32. Image idx is
    a window of its class's base field at an offset drawn from (seed, idx), so
    a crop of it is cut straight from the base.

    With data.cache_samples > 0 every DataLoader worker fills a RAM cache of
    that many preprocessed training crops at the loader's crop side when it
    starts (init_worker), as "cache in RAM" options of real loaders do. Each
    worker holds its own copy, so the memory grows with the number of workers
    and with the crop side. Loading in the main process (workers 0) caches
    nothing.
    """

    def __init__(self, seed, image_size, classes, train_size):
        self.seed, self.size, self.classes, self.train_size = seed, image_size, classes, train_size
        self.cache, self.bases = {}, None

    def __len__(self):
        raise TypeError("SyntheticImages is indexed by StepBatches keys; it has no length")

    def label(self, idx):
        return idx % self.classes

    def _base(self, label):
        """The class's base field, twice the image side: a stripe pattern that
        depends on the class plus noise drawn from the seed."""
        if self.bases is None:
            s = 2 * self.size
            g = torch.Generator().manual_seed(self.seed)
            y = torch.arange(s, dtype=torch.float32).view(s, 1)
            x = torch.arange(s, dtype=torch.float32).view(1, s)
            self.bases = []
            for c in range(self.classes):
                period = 4.0 + 3.0 * c
                stripes = torch.sin((x * (c % 2) + y * (1 - c % 2) + x * y / s) * (6.2832 / period))
                chan = ((stripes + 1) * 63).to(torch.uint8)
                noise = torch.randint(0, 128, (3, s, s), generator=g, dtype=torch.uint8)
                self.bases.append(torch.stack([chan, chan.flip(0), chan.flip(1)]) + noise)
        return self.bases[label]

    def warm(self, samples, crop, worker_id):
        """Fill this process's cache with samples preprocessed crops of side
        crop, drawn from (seed, worker_id).

        The crops live in one block of samples x 3 x crop x crop float32,
        allocated up front and filled row by row, so the memory the cache
        takes is that block: exactly samples x 3 x crop x crop x 4 bytes of
        memory private to the process. Crops allocated one by one would also
        cost the malloc heap's fragmentation from the temporaries in between,
        which varies with the C library's heuristics and the machine (+45% on
        one, about none on another), and the tests' memory limit would no
        longer sit between two workers and four.
        """
        rng = random.Random(f"{self.seed}:cache:{worker_id}")
        span = self.size - crop
        block = torch.empty((samples, 3, crop, crop), dtype=torch.float32)
        for row in range(samples):
            key = (rng.randrange(self.train_size), crop, rng.randint(0, span), rng.randint(0, span))
            x, label = self[key]
            block[row].copy_(x)
            self.cache[key] = (block[row], label)

    def __getitem__(self, key):
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        idx, crop, cy, cx = key
        rng = random.Random(self.seed * 1_000_003 + idx)
        dy, dx = rng.randrange(self.size) + cy, rng.randrange(self.size) + cx
        img = self._base(self.label(idx))[:, dy:dy + crop, dx:dx + crop]
        return (img.to(torch.float32) - 127.5) / 64.0, self.label(idx)


def crop_for(cfg, step):
    """The training crop side at step: warmup_crop_size for the first warmup_steps steps, then train_crop_size."""
    d = cfg["data"]
    return d["warmup_crop_size"] if step <= d["warmup_steps"] else d["train_crop_size"]


def stages(cfg, first, last):
    """Split steps first..last into runs of the same crop side: (first, last) pairs.

    Progressive resizing rebuilds the DataLoader at each new resolution, so
    each stage has its own workers (and their caches at its crop side).
    """
    out = []
    for step in range(first, last + 1):
        if out and crop_for(cfg, step) == crop_for(cfg, out[-1][1]):
            out[-1] = (out[-1][0], step)
        else:
            out.append((step, step))
    return out


class StepBatches:
    """Batch sampler: the micro-batches of steps first..last, grad_accum per step.

    Batch contents and crops depend only on (seed, step, micro-batch, batch
    size), so a resumed run sees the batches an uninterrupted run would have
    seen.
    """

    def __init__(self, cfg, first, last):
        self.cfg, self.first, self.last = cfg, first, last

    def __iter__(self):
        d, t = self.cfg["data"], self.cfg["train"]
        for step in range(self.first, self.last + 1):
            crop = crop_for(self.cfg, step)
            for micro in range(t["grad_accum"]):
                rng = random.Random(f"{self.cfg['seed']}:{step}:{micro}:{t['batch_size']}")
                span = d["image_size"] - crop
                yield [(rng.randrange(d["train_size"]), crop, rng.randint(0, span), rng.randint(0, span))
                       for _ in range(t["batch_size"])]

    def __len__(self):
        return (self.last - self.first + 1) * self.cfg["train"]["grad_accum"]


def init_worker(adj, samples, crop, warmed, worker_id):
    """DataLoader worker_init_fn: set the worker's OOM score, then warm its cache.

    When memory runs out, the kernel kills the task with the highest badness:
    its resident memory plus oom_score_adj (per mille of the memory it may
    use). The trainer maps all of libtorch and so often looks bigger than a
    worker; a positive adj makes a worker the victim, so the DataLoader
    reports the death ("DataLoader worker (pid N) is killed by signal:
    Killed.") instead of the whole job vanishing. Raising one's own adj needs
    no privilege. adj 0 leaves the score alone.
    """
    if adj:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(adj))
    if samples:
        torch.utils.data.get_worker_info().dataset.warm(samples, crop, worker_id)
    if warmed is not None:
        # Every worker of the stage holds its cache before any serves a
        # batch, as they do in a long run. Without this, a short stage's
        # idle workers could be shut down still warming, and whether the
        # caches together exceed the memory limit would depend on timing.
        warmed.wait(timeout=300)


def val_batches(cfg):
    d = cfg["data"]
    crop = d["val_crop_size"] or d["image_size"]
    off = (d["image_size"] - crop) // 2
    keys = [(d["train_size"] + i, crop, off, off) for i in range(d["val_size"])]
    return [keys[i:i + d["val_batch_size"]] for i in range(0, len(keys), d["val_batch_size"])]


# ---------------------------------------------------------------- model

class Net(nn.Module):
    """Fully convolutional, so it validates at any resolution."""

    def __init__(self, channels, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, channels, 3, padding=1)
        self.conv2 = nn.Conv2d(channels, 2 * channels, 3, padding=1)
        self.head = nn.Linear(2 * channels, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.relu(self.conv2(x))
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ---------------------------------------------------------------- checkpoints

def checkpoint_path(out_dir, step):
    return os.path.join(out_dir, f"step_{step}.pt")


def save_checkpoint(out_dir, step, model, opt, cfg):
    """Write step_<step>.pt atomically: temporary file, fsync, rename, fsync dir."""
    final = checkpoint_path(out_dir, step)
    tmp = os.path.join(out_dir, f".step_{step}.pt.tmp-{os.getpid()}")
    state = {"step": step, "model": model.state_dict(), "optimizer": opt.state_dict(),
             "batch_size": cfg["train"]["batch_size"], "grad_accum": cfg["train"]["grad_accum"]}
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dfd = os.open(out_dir, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    print(f"saved checkpoint {final}")


def find_checkpoint(path):
    """Return the checkpoint file to resume from: path itself, or the highest step_<N>.pt in directory path."""
    if os.path.isdir(path):
        best = None
        for name in os.listdir(path):
            if name.startswith("step_") and name.endswith(".pt") and name[5:-3].isdigit():
                n = int(name[5:-3])
                if best is None or n > best[0]:
                    best = (n, os.path.join(path, name))
        if best is None:
            die(f"--resume {path}: the directory holds no step_<N>.pt checkpoint")
        return best[1]
    if not os.path.isfile(path):
        die(f"--resume {path}: no such checkpoint file or directory")
    return path


# ---------------------------------------------------------------- loops

def validate(model, cfg, dataset, step, device):
    d = cfg["data"]
    crop = d["val_crop_size"]
    what = f"{crop}x{crop} center crops" if crop else f"{d['image_size']}x{d['image_size']} (full resolution)"
    print("gpuguard: phase=val")
    print(f"Validating at step {step}: {d['val_size']} images at {what}, batch {d['val_batch_size']}")
    model.eval()
    total_loss, correct, seen = 0.0, 0, 0
    with torch.no_grad():
        for keys in val_batches(cfg):
            x = torch.stack([dataset[k][0] for k in keys]).to(device)
            y = torch.tensor([dataset.label(k[0]) for k in keys]).to(device)
            out = model(x)
            total_loss += F.cross_entropy(out, y, reduction="sum").item()
            correct += (out.argmax(1) == y).sum().item()
            seen += len(keys)
    model.train()
    print(f"val step={step} loss={total_loss / seen:.4f} acc={correct / seen:.3f}")
    print("gpuguard: phase=train")


def main(argv):
    sys.stdout.reconfigure(line_buffering=True)
    args = parse_args(argv)
    cfg = load_config(args)
    d, t = cfg["data"], cfg["train"]
    out_dir = cfg["output_dir"]
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        die(f"cannot create output directory {out_dir}: {e.strerror}")

    torch.manual_seed(cfg["seed"])
    device = torch.device(args.device)
    if device.type == "cuda" and args.gpu_memory_mib:
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, args.gpu_memory_mib * 2**20 / total), device)
        print(f"device {device}: allocator capped at {args.gpu_memory_mib} MiB of {total >> 20} MiB")
    model = Net(cfg["model"]["channels"], cfg["model"]["classes"]).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=t["lr"], momentum=0.9)

    start = 1
    if args.resume:
        path = find_checkpoint(args.resume)
        state = torch.load(path, map_location="cpu")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"] + 1
        print(f"resumed from {path} at step {state['step']}")

    print(f"effective batch {t['batch_size'] * t['grad_accum']} "
          f"(batch_size {t['batch_size']} x grad_accum {t['grad_accum']})")
    print(f"workers {t['workers']}, cache {d['cache_samples']} samples per worker, "
          f"val_crop_size {d['val_crop_size'] if d['val_crop_size'] else 'full'}, "
          f"steps {start}..{t['steps']}, output {out_dir}")

    # The main process keeps no cache; each DataLoader worker fills its own (init_worker).
    dataset = SyntheticImages(cfg["seed"], d["image_size"], cfg["model"]["classes"], d["train_size"])
    print("gpuguard: phase=train")
    model.train()
    for first, last in stages(cfg, start, t["steps"]):
        crop = crop_for(cfg, first)
        # DataLoader forks its workers (Linux's default), so they share this barrier.
        warmed = multiprocessing.get_context("fork").Barrier(t["workers"]) if t["workers"] > 1 else None
        loader = DataLoader(dataset, batch_sampler=StepBatches(cfg, first, last), num_workers=t["workers"],
                            multiprocessing_context="fork" if t["workers"] > 0 else None,
                            worker_init_fn=functools.partial(init_worker, d["worker_oom_score_adj"],
                                                             d["cache_samples"], crop, warmed))
        batches = iter(loader)
        for step in range(first, last + 1):
            opt.zero_grad(set_to_none=True)
            loss_sum = 0.0
            for _ in range(t["grad_accum"]):
                x, y = next(batches)
                x, y = x.to(device), y.to(device)
                loss = F.cross_entropy(model(x), y) / t["grad_accum"]
                loss.backward()
                loss_sum += loss.item()
            opt.step()
            print(f"step {step}/{t['steps']} loss={loss_sum:.4f} crop={crop}")
            if step % t["checkpoint_every"] == 0 or step == t["steps"]:
                save_checkpoint(out_dir, step, model, opt, cfg)
            if step % t["val_every"] == 0 or step == t["steps"]:
                validate(model, cfg, dataset, step, device)
        del batches, loader  # the stage's workers exit, and their caches go with them

    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    vm_peak = "?"
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmPeak:"):
                    vm_peak = int(line.split()[1]) >> 10
    except OSError:
        pass
    print(f"training finished at step {t['steps']}: peak address space {vm_peak} MiB, peak RSS {peak_rss} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""gpuguard's example training job.

A small stand-in for a real training script, written with the Python standard
library only, so that `gpuguard run -- python3 examples/train.py --config
examples/config.yaml` shows a whole recovery on any machine in seconds. It
prints what real jobs print (a banner, progress bars or plain step lines, phase
markers, checkpoint lines, PyTorch's own out-of-memory message), writes real
checkpoint files atomically, resumes from them, and simulates GPU and host
memory so that settings that would not fit a real GPU fail the way they would.

Settings, lowest precedence first: built-in defaults, the YAML config
(--config), the environment (VAL_CROP_SIZE, EXAMPLE_STEP_MS), command-line
flags (--batch-size, --grad-accum, --workers, --steps).

Exit status: 0 when training finished; 1 when it died of (simulated) GPU or
host memory; 2 for a usage or config error; 143 after SIGTERM (130 after
SIGINT), with a checkpoint of the last finished step written first.

Memory model (the numbers are in examples/README.md, with worked examples)
---------------------------------------------------------------------------
GPU, capacity T = EXAMPLE_GPU_GIB (default 16) GiB:
  * CUDA context, not PyTorch's: 0.5 GiB, from the start.
  * "Reserved but unallocated" cache slack R: 2% of T, rounded up to 2 MiB
    (2 MiB when PYTORCH_CUDA_ALLOC_CONF has expandable_segments:True).
  * Model state (weights, gradients, optimizer): 2 GiB, allocated at start
    in 4 pieces and kept.
  * Training, per micro-batch: activations of 0.25 GiB per sample at 256 px,
    scaling with the pixel count ((size/256)^2), allocated in 8 equal pieces
    (one per layer) and freed after the backward pass.
  * Validation, per batch (same batch size): activations of 1/16 GiB per
    sample at 256 px (no autograd graph), at the validation resolution: the
    crop size, or the full resolution of the images when there is no crop.
  An allocation of X fails when X is more than what is free, F = T - 0.5 -
  allocated - R; the error then prints X, T, F, in use (T - F), allocated and
  R, exactly as PyTorch's caching allocator prints them.
Host, EXAMPLE_HOST_GIB (default 8) GiB: the main process 1 GiB, each
  DataLoader worker 1.5 GiB. When they do not fit, the kernel's OOM killer
  takes a worker (a real forked process, killed with SIGKILL) two steps into
  the attempt, and the job fails as PyTorch's DataLoader reports it.
"""

import argparse
import hashlib
import json
import math
import os
import re
import signal
import sys
import time

GIB = 1 << 30
MIB = 1 << 20

CUDA_CONTEXT = GIB // 2
MODEL_STATE = 2 * GIB
TRAIN_ACT_PER_SAMPLE = GIB // 4  # at 256 px
VAL_ACT_PER_SAMPLE = GIB // 16  # at 256 px
LAYERS = 8
HOST_MAIN = 1.0  # GiB
HOST_PER_WORKER = 1.5  # GiB

DEFAULTS = {
    "data": {
        "image_size": 256,
        "final_image_size": None,
        "final_size_from_step": None,
        "full_resolution": 1024,
        "val_crop_size": None,
    },
    "train": {
        "steps": 200,
        "steps_per_epoch": 50,
        "batch_size": 32,
        "grad_accum": 1,
        "workers": 4,
        "val_every": 50,
        "val_batches": 4,
        "ckpt_every": 25,
        "step_ms": 12,
    },
    "output": {"dir": ".gpuguard/example"},
}


class ConfigError(Exception):
    """A config file or setting this script cannot use."""


# --------------------------------------------------------------------------
# A parser for the YAML subset the config uses: nested mappings of scalars
# (integers, floats, booleans, null, plain or quoted strings) and comments.
# Anything else (lists, flow collections, anchors, multi-line strings) is an
# error naming the line, never a silent misreading.


def _strip_comment(line):
    quote = None
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


_KEY = re.compile(r"""^("(?:[^"\\]|\\.)*"|'(?:[^']|'')*'|[^\s"'#:][^:]*?)\s*:(?:\s+(.*))?$""")
_INT = re.compile(r"^[-+]?(?:0|[1-9][0-9]*)$")
_FLOAT = re.compile(r"^[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+|[0-9]+)(?:[eE][-+]?[0-9]+)?$")


def _scalar(text, where):
    if text in ("null", "Null", "NULL", "~"):
        return None
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if text.startswith('"'):
        if len(text) < 2 or not text.endswith('"'):
            raise ConfigError(f"{where}: unterminated double-quoted string")
        try:
            return json.loads(text)
        except ValueError as e:
            raise ConfigError(f"{where}: bad double-quoted string: {e}") from None
    if text.startswith("'"):
        if len(text) < 2 or not text.endswith("'"):
            raise ConfigError(f"{where}: unterminated single-quoted string")
        return text[1:-1].replace("''", "'")
    if text[0] in "[{&*!|>%@`":
        raise ConfigError(
            f"{where}: {text!r} uses YAML this parser does not read "
            "(only nested mappings of scalars are supported)")
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def parse_yaml_subset(text, name):
    """Parse nested mappings of scalars; raise ConfigError naming file:line."""
    entries = []  # (line number, indent, key, value text or None)
    for num, raw in enumerate(text.splitlines(), 1):
        where = f"{name}:{num}"
        line = _strip_comment(raw).rstrip()
        if not line.strip():
            continue
        body = line.lstrip(" ")
        if body.startswith("\t"):
            raise ConfigError(f"{where}: tab in indentation; indent with spaces")
        indent = len(line) - len(body)
        if indent == 0 and body in ("---", "..."):
            continue
        if body == "-" or body.startswith("- "):
            raise ConfigError(f"{where}: lists are not supported in this config")
        m = _KEY.match(body)
        if not m:
            raise ConfigError(f"{where}: expected 'key: value', got {body!r}")
        key = m.group(1)
        if key[0] in "\"'":
            key = _scalar(key, where)
        entries.append((num, indent, key, m.group(2)))

    def block(i, indent):
        out = {}
        while i < len(entries):
            num, ind, key, value = entries[i]
            where = f"{name}:{num}"
            if ind < indent:
                break
            if ind > indent:
                raise ConfigError(f"{where}: unexpected indentation")
            if key in out:
                raise ConfigError(f"{where}: key {key!r} appears twice")
            i += 1
            if value is None or value == "":
                if i < len(entries) and entries[i][1] > indent:
                    out[key], i = block(i, entries[i][1])
                else:
                    out[key] = None
            else:
                out[key] = _scalar(value, where)
        return out, i

    if not entries:
        return {}
    result, i = block(0, entries[0][1])
    if i != len(entries):
        raise ConfigError(f"{name}:{entries[i][0]}: unexpected indentation")
    return result


def merge(base, over, path, name):
    for key, value in over.items():
        dotted = f"{path}{key}"
        if key not in base:
            print(f"warning: {name}: unknown config key {dotted} (ignored)", file=sys.stderr)
            continue
        if isinstance(base[key], dict):
            if value is None:
                continue
            if not isinstance(value, dict):
                raise ConfigError(f"{name}: {dotted} must be a mapping, got {value!r}")
            merge(base[key], value, dotted + ".", name)
        elif isinstance(value, dict):
            raise ConfigError(f"{name}: {dotted} must be a scalar, got a mapping")
        else:
            base[key] = value


def as_int(value, key, minimum, nullable=False):
    if value is None and nullable:
        return None
    if isinstance(value, str) and value.strip().lower() in ("null", "none", "~", ""):
        if nullable:
            return None
        raise ConfigError(f"{key} must be an integer >= {minimum}, got {value!r}")
    if isinstance(value, bool):
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and _INT.match(value.strip()):
        value = int(value.strip())
    if not isinstance(value, int):
        raise ConfigError(f"{key} must be an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(f"{key} must be >= {minimum}, got {value}")
    return value


# --------------------------------------------------------------------------
# Simulated devices.


class OutOfMemoryError(RuntimeError):
    """Stands in for torch.OutOfMemoryError; printed as PyTorch prints it."""


OutOfMemoryError.__module__ = "torch"


def format_size(n):
    """Bytes as PyTorch's caching allocator formats them (format_size)."""
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1048576:
        return f"{n / 1024:.2f} KiB"
    if n <= 1073741824:
        return f"{n / 1048576:.2f} MiB"
    return f"{n / 1073741824:.2f} GiB"


def round_up(n, unit=2 * MIB):
    return (n + unit - 1) // unit * unit


class SimulatedGPU:
    """GPU 0 with a caching allocator's bookkeeping, and nothing else."""

    def __init__(self, total, expandable, out):
        self.total = total
        self.allocated = 0
        self.slack = 2 * MIB if expandable else round_up(int(total * 0.02))
        self.out = out

    def free_bytes(self):
        return self.total - CUDA_CONTEXT - self.allocated - self.slack

    def malloc(self, size):
        size = round_up(size)
        free = self.free_bytes()
        if size > free:
            self.out.end_bar()
            in_use = self.total - free
            raise OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {format_size(size)}. "
                f"GPU 0 has a total capacity of {format_size(self.total)} of which "
                f"{format_size(free)} is free. Including non-PyTorch memory, this process "
                f"has {format_size(in_use)} memory in use. Of the allocated memory "
                f"{format_size(self.allocated)} is allocated by PyTorch, and "
                f"{format_size(self.slack)} is reserved by PyTorch but unallocated. If "
                "reserved but unallocated memory is large try setting "
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  "
                "See documentation for Memory Management  "
                "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)")
        self.allocated += size
        return size

    def free(self, size):
        self.allocated -= size


def layer_forward(gpu, nbytes):
    """Allocate a forward pass's activations, one piece per layer."""
    piece = round_up(max(1, nbytes // LAYERS))
    held = []
    try:
        for _ in range(LAYERS):
            held.append(gpu.malloc(piece))
    except BaseException:
        for size in held:
            gpu.free(size)
        raise
    return held


def release(gpu, held):
    for size in held:
        gpu.free(size)


class DataLoaderWorkers:
    """The host side: worker processes and what the kernel does to them."""

    def __init__(self, workers, host_gib, out):
        self.workers = workers
        self.need = HOST_MAIN + workers * HOST_PER_WORKER
        self.host_gib = host_gib
        self.out = out

    def fits(self):
        return self.need <= self.host_gib

    def _try_get_data(self):
        # The kernel's OOM killer takes a worker: fork a real one and kill it,
        # so that the pid in the message is a process that died of SIGKILL.
        self.out.end_bar()
        sys.stdout.flush()
        sys.stderr.flush()
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.close(w)
            os.read(r, 1)
            os._exit(0)
        os.close(r)
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        os.close(w)
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            raise RuntimeError(f"DataLoader worker (pid {pid}) is killed by signal: Killed.")
        raise RuntimeError(f"DataLoader worker (pid(s) {pid}) exited unexpectedly")

    def next_batch(self, attempt_step):
        if not self.fits() and attempt_step >= 2:
            self._try_get_data()


# --------------------------------------------------------------------------
# Output.


class Output:
    """Progress as tqdm draws it on a terminal, plain lines otherwise."""

    def __init__(self, tty):
        self.tty = tty
        self.bar_open = False

    def line(self, text, err=False):
        self.end_bar()
        print(text, file=sys.stderr if err else sys.stdout, flush=True)

    def end_bar(self):
        if self.bar_open:
            sys.stdout.write("\n")
            sys.stdout.flush()
            self.bar_open = False

    @staticmethod
    def bar(prefix, n, total, postfix):
        frac = n / total if total else 1.0
        filled = int(frac * 10)
        return f"{prefix}: {int(frac * 100):3d}%|{'#' * filled}{' ' * (10 - filled)}| {n}/{total} [{postfix}]"

    def progress(self, prefix, n, total, postfix, plain):
        if self.tty:
            sys.stdout.write("\r" + self.bar(prefix, n, total, postfix))
            sys.stdout.flush()
            self.bar_open = True
            if n == total:
                self.end_bar()
        elif plain:
            print(plain, flush=True)


# --------------------------------------------------------------------------
# Checkpoints.


def digest_step(prev, effective_batch, step):
    return hashlib.sha256(f"{prev}|effective_batch={effective_batch}|step={step}".encode()).hexdigest()


def loss_at(step, digest):
    jitter = (int(digest[:4], 16) / 65535.0 - 0.5) * 0.02
    return 0.1 + 2.4 * math.exp(-step / 60.0) + jitter


def save_checkpoint(out_dir, step, cfg, digest, out):
    """Write step_<step>.ckpt atomically: temp file, fsync, rename, fsync dir."""
    os.makedirs(out_dir, exist_ok=True)
    final = os.path.join(out_dir, f"step_{step}.ckpt")
    tmp = os.path.join(out_dir, f".step_{step}.ckpt.tmp-{os.getpid()}")
    t = cfg["train"]
    body = {
        "format": "gpuguard-example-checkpoint/1",
        "step": step,
        "effective_batch": t["batch_size"] * t["grad_accum"],
        "batch_size": t["batch_size"],
        "grad_accum": t["grad_accum"],
        "weights_sha256": digest,
    }
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(body, f, indent=2)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fd = os.open(out_dir, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    out.line(f"saved checkpoint {final} (step {step})")
    return final


def load_checkpoint(path):
    try:
        with open(path, encoding="utf-8") as f:
            body = json.load(f)
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot resume from {path}: {e}") from None
    if not isinstance(body, dict) or not isinstance(body.get("step"), int) \
            or not isinstance(body.get("weights_sha256"), str) or body["step"] < 0:
        raise ConfigError(f"cannot resume from {path}: not a checkpoint of this example "
                          "(needs integer 'step' and 'weights_sha256')")
    return body


# --------------------------------------------------------------------------
# Training.


class Stop(Exception):
    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


class Job:
    def __init__(self, cfg, args, out):
        self.cfg = cfg
        self.args = args
        self.out = out
        self.stop_signal = None
        d, t = cfg["data"], cfg["train"]
        self.batch = t["batch_size"]
        self.accum = t["grad_accum"]
        self.effective = self.batch * self.accum
        gpu_gib = float(os.environ.get("EXAMPLE_GPU_GIB", "16"))
        host_gib = float(os.environ.get("EXAMPLE_HOST_GIB", "8"))
        if gpu_gib < 1 or host_gib <= 0:
            raise ConfigError("EXAMPLE_GPU_GIB must be >= 1 and EXAMPLE_HOST_GIB > 0")
        expandable = "expandable_segments:true" in os.environ.get(
            "PYTORCH_CUDA_ALLOC_CONF", "").replace(" ", "").lower()
        self.gpu = SimulatedGPU(int(gpu_gib * GIB), expandable, out)
        self.loader = DataLoaderWorkers(t["workers"], host_gib, out)
        self.gpu_gib, self.host_gib = gpu_gib, host_gib
        self.val_res = d["val_crop_size"] or d["full_resolution"]
        self.last_done = 0
        self.last_saved = None
        self.digest = hashlib.sha256(b"gpuguard-example|init").hexdigest()

    def on_signal(self, signum, frame):
        self.stop_signal = signum

    def check_stop(self):
        if self.stop_signal is not None:
            raise Stop(self.stop_signal)

    def image_size(self, step):
        d = self.cfg["data"]
        if d["final_image_size"] and d["final_size_from_step"] and step >= d["final_size_from_step"]:
            return d["final_image_size"]
        return d["image_size"]

    def banner(self, start):
        d, t = self.cfg["data"], self.cfg["train"]
        out = self.out
        out.line(f"example: gpuguard's example training job (pid {os.getpid()})")
        sizes = f"image_size={d['image_size']}"
        if d["final_image_size"] and d["final_size_from_step"]:
            sizes += f" ({d['final_image_size']} from step {d['final_size_from_step']})"
        val = (f"val_crop_size={d['val_crop_size']}" if d["val_crop_size"]
               else f"val_crop_size=null (full resolution, {d['full_resolution']} px)")
        out.line(f"data: {sizes} full_resolution={d['full_resolution']} {val}")
        out.line(f"batch_size={self.batch} grad_accum={self.accum} "
                 f"effective batch size={self.effective} workers={t['workers']}")
        out.line(f"steps={t['steps']} val_every={t['val_every']} ckpt_every={t['ckpt_every']} "
                 f"output={self.cfg['output']['dir']}")
        out.line(f"simulated GPU 0: {self.gpu_gib:.2f} GiB (EXAMPLE_GPU_GIB), "
                 f"host: {self.host_gib:.2f} GiB (EXAMPLE_HOST_GIB)")
        if start > 1:
            out.line(f"starting at step {start}")

    def save(self, step):
        if self.last_saved == step:
            return
        save_checkpoint(self.cfg["output"]["dir"], step, self.cfg, self.digest, self.out)
        self.last_saved = step

    def validate(self, step):
        t = self.cfg["train"]
        out = self.out
        out.line("gpuguard: phase=val")
        crop = self.cfg["data"]["val_crop_size"]
        how = f"center crops of {crop} px" if crop else f"full resolution ({self.val_res} px)"
        out.line(f"Validating: step {step}, {t['val_batches']} batches at {how}")
        per_sample = VAL_ACT_PER_SAMPLE * self.val_res * self.val_res // (256 * 256)
        total = 0.0
        n = t["val_batches"]
        delay = t["step_ms"] / 1000.0
        for i in range(1, n + 1):
            time.sleep(delay)  # the DataLoader hands over the batch
            held = layer_forward(self.gpu, self.batch * per_sample)
            release(self.gpu, held)
            total += loss_at(step, hashlib.sha256(f"{self.digest}|val|{i}".encode()).hexdigest()) * 0.9
            out.progress("Validating", i, n, f"step {step}", None)
            self.check_stop()
        out.line(f"val step {step} val_loss {total / n:.3f}")
        out.line("gpuguard: phase=train")

    def train(self, start):
        t = self.cfg["train"]
        out = self.out
        steps, spe = t["steps"], t["steps_per_epoch"]
        delay = t["step_ms"] / 1000.0
        self.last_done = start - 1
        self.last_saved = start - 1 if start > 1 else None

        model = []
        for _ in range(4):  # model.to("cuda")
            model.append(self.gpu.malloc(MODEL_STATE // 4))

        out.line("gpuguard: phase=train")
        size = None
        for step in range(start, steps + 1):
            epoch = (step - 1) // spe + 1
            in_epoch = (step - 1) % spe + 1
            if in_epoch == 1 or step == start:
                out.line(f"Epoch {epoch}/{(steps + spe - 1) // spe}")
            if self.image_size(step) != size:
                if size is not None:
                    out.line(f"progressive resizing: image_size {size} -> {self.image_size(step)} "
                             f"from step {step}")
                size = self.image_size(step)
            per_sample = TRAIN_ACT_PER_SAMPLE * size * size // (256 * 256)
            for _ in range(self.accum):
                self.loader.next_batch(step - start + 1)
                held = layer_forward(self.gpu, self.batch * per_sample)
                release(self.gpu, held)
            time.sleep(delay)
            self.digest = digest_step(self.digest, self.effective, step)
            self.last_done = step
            loss = loss_at(step, self.digest)
            out.progress(f"Epoch {epoch}", in_epoch, min(spe, steps - (epoch - 1) * spe),
                         f"step {step}, loss={loss:.3f}", f"step {step} loss {loss:.3f}")
            self.check_stop()
            if step % t["ckpt_every"] == 0:
                self.save(step)
            if step % t["val_every"] == 0:
                self.validate(step)
            self.check_stop()
        self.save(steps)
        release(self.gpu, model)
        out.line(f"training complete: {steps} steps, effective batch size {self.effective}, "
                 f"weights sha256 {self.digest}")


def build_config(args):
    cfg = json.loads(json.dumps(DEFAULTS))
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise ConfigError(f"cannot read config {args.config}: {e.strerror}") from None
        merge(cfg, parse_yaml_subset(text, args.config), "", args.config)
    env = os.environ.get("VAL_CROP_SIZE")
    if env is not None:
        cfg["data"]["val_crop_size"] = env
    steps_ms = os.environ.get("EXAMPLE_STEP_MS")
    if steps_ms is not None:
        cfg["train"]["step_ms"] = steps_ms
    for flag, key in (("batch_size", "batch_size"), ("grad_accum", "grad_accum"),
                      ("workers", "workers"), ("steps", "steps")):
        value = getattr(args, flag)
        if value is not None:
            cfg["train"][key] = value

    d, t = cfg["data"], cfg["train"]
    d["image_size"] = as_int(d["image_size"], "data.image_size", 8)
    d["final_image_size"] = as_int(d["final_image_size"], "data.final_image_size", 8, True)
    d["final_size_from_step"] = as_int(d["final_size_from_step"], "data.final_size_from_step", 1, True)
    d["full_resolution"] = as_int(d["full_resolution"], "data.full_resolution", 8)
    d["val_crop_size"] = as_int(d["val_crop_size"], "data.val_crop_size (or VAL_CROP_SIZE)", 8, True)
    for key, minimum in (("steps", 1), ("steps_per_epoch", 1), ("batch_size", 1), ("grad_accum", 1),
                         ("workers", 0), ("val_every", 1), ("val_batches", 1), ("ckpt_every", 1),
                         ("step_ms", 0)):
        t[key] = as_int(t[key], f"train.{key}", minimum)
    if not isinstance(cfg["output"]["dir"], str) or not cfg["output"]["dir"]:
        raise ConfigError(f"output.dir must be a path, got {cfg['output']['dir']!r}")
    return cfg


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="train.py", allow_abbrev=False,
        description="gpuguard's example training job (simulated GPU; standard library only).")
    parser.add_argument("--config", help="YAML config (see examples/config.yaml)")
    parser.add_argument("--batch-size", type=int, help="overrides train.batch_size")
    parser.add_argument("--grad-accum", type=int, help="overrides train.grad_accum")
    parser.add_argument("--workers", type=int, help="overrides train.workers")
    parser.add_argument("--steps", type=int, help="overrides train.steps")
    parser.add_argument("--resume", metavar="PATH", help="checkpoint to continue from (at its step + 1)")
    args = parser.parse_args(argv)

    try:
        cfg = build_config(args)
        resume = load_checkpoint(args.resume) if args.resume else None
    except ConfigError as e:
        print(f"train.py: error: {e}", file=sys.stderr)
        return 2

    try:
        sys.stdout.reconfigure(line_buffering=True)
    except (AttributeError, ValueError):
        pass
    out = Output(sys.stdout.isatty())
    try:
        job = Job(cfg, args, out)
    except ConfigError as e:
        print(f"train.py: error: {e}", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, job.on_signal)
    signal.signal(signal.SIGINT, job.on_signal)

    start = 1
    if resume is not None:
        start = resume["step"] + 1
        job.digest = resume["weights_sha256"]
        out.line(f"resumed from {args.resume} at step {resume['step']}")
        if resume.get("effective_batch") not in (None, job.effective):
            out.line(f"note: effective batch size changed from {resume['effective_batch']} "
                     f"to {job.effective}")
    else:
        ckdir = cfg["output"]["dir"]
        if os.path.isdir(ckdir):
            old = [n for n in os.listdir(ckdir) if re.fullmatch(r"step_\d+\.ckpt", n)]
            if old:
                out.line(f"note: {ckdir} already holds {len(old)} checkpoint(s) from an earlier run; "
                         "starting at step 1 (pass --resume PATH to continue one)")
    job.banner(start)
    if start > cfg["train"]["steps"]:
        out.line(f"nothing to do: the checkpoint is at step {start - 1}, "
                 f"train.steps is {cfg['train']['steps']}")
        return 0
    try:
        job.train(start)
    except Stop as s:
        out.end_bar()
        name = signal.Signals(s.signum).name
        step = job.last_done
        job.save(step)
        out.line(f"{name} received: checkpoint of step {step} is in {cfg['output']['dir']}; exiting")
        return 128 + s.signum
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""gpuguard's torch probe: what a PyTorch job does, seen from inside it.

Loaded by gpuguard's sitecustomize.py (gpuguard run --probe torch). It never
imports torch: an import hook waits for the job to import it, then wraps
Module.train (eval calls it), Module.__call__, the optimizers' step and
autograd's backward. It writes one JSON object per line to
$GPUGUARD_PROBE_DIR/probe-<pid>.jsonl, never to the job's output.

It must never change what the job does: the job's own calls always run, and
run first; nothing of the probe's raises into the job (a failure inside it is
written once as an "error" record and the probe switches itself off); it
holds no reference to the job's tensors; it never calls empty_cache or
synchronises, and never initialises CUDA (CUDA statistics are read only once
the job has initialised it).

Records ("t"): phase (train/val, and how it was seen), step (at most one per
interval, the first always), oom (the module path whose forward was running,
the pass, phase, step, input shapes, whether grad was on, and the failing
block's position in the model's repeated blocks), error (the probe's own failure). Every
record has pid, rank, local_rank, time, step, phase; phase, step and oom
records carry memory ("mem": host RSS, and CUDA allocator figures where
CUDA is initialised).
"""

import json
import os
import sys
import threading
import time

_dir = os.environ.get("GPUGUARD_PROBE_DIR", "")
_interval = 1.0
try:
    _interval = float(os.environ.get("GPUGUARD_PROBE_INTERVAL", "1"))
except ValueError:
    pass
# Test hook: make the probe fail at one of its points (activate, phase, step,
# forward, write), to check that a failure leaves the job as it was.
_fail_at = os.environ.get("GPUGUARD_PROBE_FAIL", "")

_on = False  # activated and not switched off
_torch = None
_lock = threading.Lock()

# Per process (reset when the pid changes after a fork).
_pid = 0
_fd = -1
_silent = False  # a DataLoader worker, or nothing to write to

_phase = ""
_step = 0
_last_step_write = 0.0
_last_mem = 0.0
_nograd_run = 0  # consecutive outermost forwards without grad
_outer_grad = True  # whether the running outermost forward began with grad on
_depth = 0  # Module.__call__ nesting
_train_depth = 0  # Module.train nesting
_exc_id = 0  # the exception being followed out of nested forwards
_exc_chain = []  # modules it left, innermost first
_exc_shapes = None
_reported = 0  # id of the exception a recomputation reported, until its backward ends
_roots = None  # weakref.WeakSet of modules called outermost
_opt_steps = None  # weakref.WeakKeyDictionary optimizer -> steps
_history = False  # CUDA memory history recording switched on
_backward = 0  # autograd.backward calls running (a forward inside one is a recomputation)
_pagesize = 4096


class _ProbeFailure(Exception):
    pass


def _maybe_fail(where):
    if _fail_at == where:
        raise _ProbeFailure("deliberate probe failure at " + where + " (GPUGUARD_PROBE_FAIL)")


def install():
    """Called by sitecustomize: wait for torch to be imported."""
    if not _dir or "torch" in sys.modules:
        return
    sys.meta_path.insert(0, _Finder())


class _Finder:
    """A meta path finder that lets torch load as usual, then activates."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        try:
            import importlib.util

            spec = importlib.util.find_spec("torch")
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            loader = spec.loader
            orig = loader.exec_module

            def exec_module(module):
                orig(module)
                _activate(module)

            loader.exec_module = exec_module
            return spec
        except Exception:
            return None

    def find_module(self, fullname, path=None):  # Python < 3.4 protocol
        return None


def _activate(torch):
    global _on, _torch, _roots, _opt_steps, _pagesize
    try:
        import weakref

        _maybe_fail("activate")
        _torch = torch
        _roots = weakref.WeakSet()
        _opt_steps = weakref.WeakKeyDictionary()
        try:
            _pagesize = os.sysconf("SC_PAGE_SIZE")
        except Exception:
            pass
        _patch_module(torch.nn.Module)
        _patch_optimizer(torch.optim.Optimizer)
        _patch_backward(torch.autograd)
        _on = True
    except Exception as e:
        _failed("activate", e)


# ---- the side channel ----


def _rank(name):
    v = os.environ.get(name)
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def _is_worker():
    try:
        if _torch.utils.data.get_worker_info() is not None:
            return True
    except Exception:
        pass
    return False


def _ready():
    """Whether this process may write (opens its file on first use)."""
    global _pid, _fd, _silent, _depth, _train_depth, _exc_id, _exc_chain
    pid = os.getpid()
    if pid == _pid:
        return not _silent
    # A new process: the first event, or a fork of the one that had a file.
    _pid, _silent, _depth, _train_depth, _exc_id, _exc_chain = pid, False, 0, 0, 0, []
    if _fd >= 0:
        _fd = -1  # the parent's; left open for it
    if _is_worker():
        _silent = True
        return False
    path = os.path.join(_dir, "probe-%d.jsonl" % pid)
    _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    _write(
        "start",
        {
            "ppid": os.getppid(),
            "world_size": _rank("WORLD_SIZE"),
            "torch": getattr(_torch, "__version__", ""),
            "python": "%d.%d.%d" % sys.version_info[:3],
            "argv": list(sys.argv[:1]),  # the program only: arguments may hold secrets (docs/secrets.md)
        },
    )
    return True


def _write(kind, fields):
    _maybe_fail("write")
    rec = {
        "t": kind,
        "time": round(time.time(), 3),
        "pid": _pid,
        "rank": _rank("RANK"),
        "local_rank": _rank("LOCAL_RANK"),
        "phase": _phase,
        "step": _step,
    }
    rec.update(fields)
    data = (json.dumps(rec, separators=(",", ":"), default=str) + "\n").encode()
    os.write(_fd, data)  # O_APPEND: one write, one whole line


def _failed(where, e):
    """Reports the probe's own failure once and switches it off."""
    global _on
    if not _on and where != "activate":
        return  # reported already
    _on = False
    try:
        if _dir and not _silent:
            msg = "%s: %s" % (type(e).__name__, e)
            fd = _fd
            if fd < 0 or _pid != os.getpid():
                path = os.path.join(_dir, "probe-%d.jsonl" % os.getpid())
                fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            rec = {"t": "error", "time": round(time.time(), 3), "pid": os.getpid(), "rank": _rank("RANK"),
                   "local_rank": _rank("LOCAL_RANK"), "where": where, "error": msg[:500]}
            os.write(fd, (json.dumps(rec, default=str) + "\n").encode())
    except Exception:
        pass


# ---- memory ----


def _memory():
    m = {}
    try:
        with open("/proc/self/statm", "rb") as f:
            m["host_rss"] = int(f.read().split()[1]) * _pagesize
    except Exception:
        try:
            import resource

            m["host_max_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        except Exception:
            pass
    cuda = _torch.cuda
    if cuda.is_initialized():  # never initialise it ourselves
        _start_history()
        s = cuda.memory_stats()
        alloc = s.get("allocated_bytes.all.current", 0)
        res = s.get("reserved_bytes.all.current", 0)
        m["cuda_device"] = cuda.current_device()
        m["cuda_allocated"] = alloc
        m["cuda_reserved"] = res
        m["cuda_reserved_unallocated"] = res - alloc
        m["cuda_peak_allocated"] = s.get("allocated_bytes.all.peak", 0)
        m["cuda_alloc_retries"] = s.get("num_alloc_retries", 0)
        m["cuda_ooms"] = s.get("num_ooms", 0)
    return m


def _start_history():
    global _history
    if _history or os.environ.get("GPUGUARD_PROBE_MEMORY_HISTORY", "1") == "0":
        return
    _history = True
    try:
        _torch.cuda.memory._record_memory_history(True)
    except Exception:
        pass


def _memory_due(now):
    global _last_mem
    if now - _last_mem >= _interval:
        _last_mem = now
        return True
    return False


def _hide(e):
    """Takes the probe's wrapper frame out of e's traceback, so that the
    job's tracebacks read as they would without the probe."""
    try:
        tb = e.__traceback__
        if tb is not None and tb.tb_frame is sys._getframe(1):
            e.__traceback__ = tb.tb_next
    except Exception:
        pass


# ---- phase ----


def _set_phase(phase, how):
    global _phase, _last_mem
    if phase == _phase:
        return
    ready = _ready()  # the start record has the phase before this one
    _phase = phase
    if ready:
        _last_mem = time.monotonic()
        _write("phase", {"how": how, "mem": _memory()})


def _patch_module(Module):
    orig_train = Module.train
    orig_call = Module.__call__

    def train(self, mode=True):
        global _train_depth
        if _train_depth == 0 and _on:
            try:
                _maybe_fail("phase")
                if mode:
                    _set_phase("train", "train()")
                elif len(_roots) == 0 or self in _roots:
                    # A submodule put in eval mode (a frozen backbone) is no
                    # validation; the model the job calls is.
                    _set_phase("val", "eval()")
            except Exception as e:
                _failed("phase", e)
        _train_depth += 1
        try:
            r = orig_train(self, mode)
        except BaseException as e:
            _train_depth -= 1
            _hide(e)
            raise
        _train_depth -= 1
        return r

    def __call__(self, *args, **kwargs):
        global _depth
        if not _on:
            try:
                return orig_call(self, *args, **kwargs)
            except BaseException as e:
                _hide(e)
                raise
        d = _depth
        if d == 0:
            _outermost(self)
        _depth = d + 1
        try:
            r = orig_call(self, *args, **kwargs)
        except BaseException as e:
            _depth = d
            if _on:
                _left(self, args, kwargs, e, d)
            _hide(e)
            raise
        _depth = d
        return r

    train.__wrapped__ = orig_train
    __call__.__wrapped__ = orig_call
    Module.train = train
    Module.__call__ = __call__


def _outermost(module):
    """An outermost forward: its module is a root; grad mode tells the phase."""
    global _nograd_run, _exc_chain, _outer_grad
    try:
        _maybe_fail("forward")
        _exc_chain = []  # whatever was followed has ended
        _roots.add(module)
        _outer_grad = bool(_torch.is_grad_enabled())
        if _outer_grad:
            _nograd_run = 0
            if module.training:
                _set_phase("train", "forward with grad")
        else:
            _nograd_run += 1
            # Two in a row: one no_grad forward between training forwards
            # is a teacher or an EMA model, not validation.
            if _nograd_run >= 2:
                _set_phase("val", "forward without grad")
    except Exception as e:
        _failed("forward", e)


# ---- the OOM's place ----


def _is_oom(e):
    t = _torch
    try:
        if isinstance(e, t.cuda.OutOfMemoryError):
            return True
    except AttributeError:
        pass
    if isinstance(e, MemoryError):
        return True
    if isinstance(e, RuntimeError):
        s = str(e)
        return "out of memory" in s or "can't allocate memory" in s
    return False


def _shapes(args, kwargs):
    def one(v):
        if isinstance(v, _torch.Tensor):
            return list(v.shape)
        if isinstance(v, (list, tuple)) and len(v) <= 8:
            return [one(x) for x in v]
        return type(v).__name__

    out = [one(a) for a in args[:8]]
    for k in list(kwargs)[:8]:
        out.append({k: one(kwargs[k])})
    return out


def _left(module, args, kwargs, e, depth):
    """An exception leaves module's forward (innermost first)."""
    global _exc_id, _exc_chain, _exc_shapes, _reported
    try:
        if id(e) != _exc_id or not _exc_chain:
            if not _is_oom(e):
                return
            _exc_id, _exc_chain, _exc_shapes = id(e), [], _shapes(args, kwargs)
        _exc_chain.append(module)
        if depth == 0:
            chain, shapes = _exc_chain, _exc_shapes
            _exc_id, _exc_chain, _exc_shapes = 0, [], None
            extra = {"grad": _outer_grad}
            block = _block(chain)
            if block:
                extra["block"] = block
            # A forward run by autograd (activation checkpointing's
            # recomputation) is part of the backward pass.
            pass_ = "forward"
            if _backward > 0:
                # The recomputation's outermost module is the block itself:
                # its path says nothing of the model's blocks.
                pass_ = "backward"
                extra.pop("block", None)
                _reported = id(e)  # the backward wrapper's own report would repeat it
            _report_oom(e, pass_, _path(chain), shapes, extra)
    except Exception as err:
        _failed("oom", err)


def _path(chain):
    """The dotted path of chain[0] from the outermost module chain[-1]."""
    parts = [type(chain[-1]).__name__]
    for i in range(len(chain) - 1, 0, -1):
        parent, child = chain[i], chain[i - 1]
        if child is parent:
            continue
        name = None
        for n, m in parent.named_modules():
            if m is child:
                name = n
                break
        parts.append(name if name else type(child).__name__)
    return ".".join(parts)


def _block(chain):
    """Where the failing module sits in the model's repeated blocks:
    {"container", "index", "of"}, or None.

    Every numeric step of the failing module's path (model.layers.17.mlp,
    encoder.layer.5, blocks.11, layer3.2) is an element of a ModuleList or a
    Sequential; the one with the most elements is taken (the outermost on a
    tie): the stack of a transformer's layers rather than a block's own
    small Sequential. Its siblings in the same parent that hold blocks of
    the same type (torchvision ResNet's layer1 to layer4) count as one
    sequence in registration order, so layer3.2 of [3, 4, 6, 3] is block 9
    of 16. The container is named by its path; for a sequence of siblings,
    by the first and last ("layer1..layer4").
    """
    root = chain[-1]
    names = []
    for i in range(len(chain) - 1, 0, -1):
        parent, child = chain[i], chain[i - 1]
        if child is parent:
            continue
        name = None
        for n, m in parent.named_modules():
            if m is child:
                name = n
                break
        if not name:
            return None
        names.append(name)
    segs = ".".join(names).split(".") if names else []
    seqs = (_torch.nn.ModuleList, _torch.nn.Sequential)
    best = None
    for i, seg in enumerate(segs):
        if not seg.isdigit():
            continue
        try:
            cont = root.get_submodule(".".join(segs[:i]))
        except Exception:
            return None
        if isinstance(cont, seqs) and len(cont) >= 2 and (best is None or len(cont) > best[2]):
            best = (i, int(seg), len(cont), cont)
    if best is None:
        return None
    i, index, of, cont = best
    if i == 0:
        return {"container": type(root).__name__, "index": index, "of": of}
    parent = root.get_submodule(".".join(segs[: i - 1]))
    kind = type(cont[0])
    same = [(n, c) for n, c in parent.named_children() if isinstance(c, seqs) and len(c) > 0 and type(c[0]) is kind]
    before = 0
    for n, c in same:
        if c is cont:
            break
        before += len(c)
    name = same[0][0] if len(same) == 1 else same[0][0] + ".." + same[-1][0]
    return {"container": ".".join(segs[: i - 1] + [name]), "index": before + index, "of": sum(len(c) for _, c in same)}


def _report_oom(e, pass_, module, shapes, extra=None):
    first = str(e).strip().splitlines()
    rec = {
        "pass": pass_,
        "module": module,
        "shapes": shapes,
        "error_type": type(e).__name__,
        "error": (first[0] if first else "")[:500],
        "mem": _memory(),
    }
    if extra:
        rec.update(extra)
    snap = _snapshot()
    if snap:
        rec["snapshot"] = snap
    _write("oom", rec)


def _snapshot():
    """Dumps the CUDA allocator's snapshot (with history) next to the records."""
    try:
        if not _torch.cuda.is_initialized():
            return ""
        import pickle

        s = _torch.cuda.memory._snapshot()
        path = os.path.join(_dir, "oom-snapshot-%d.pickle" % os.getpid())
        with open(path, "wb") as f:
            pickle.dump(s, f)
        return path
    except Exception:
        return ""


# ---- steps and backward ----


def _patch_optimizer(Optimizer):
    orig_init = Optimizer.__init__

    def __init__(self, *args, **kwargs):
        orig_init(self, *args, **kwargs)
        if _on:
            try:
                _wrap_step(type(self))
            except Exception as e:
                _failed("step", e)

    __init__.__wrapped__ = orig_init
    Optimizer.__init__ = __init__


def _wrap_step(cls):
    orig = getattr(cls, "step", None)
    if orig is None or getattr(orig, "_gpuguard", False):
        return  # wrapped already (here or in a base class)

    def step(self, *args, **kwargs):
        try:
            r = orig(self, *args, **kwargs)
        except BaseException as e:
            if _on:
                try:
                    if _is_oom(e):
                        _report_oom(e, "optimizer.step", type(self).__name__, [])
                except Exception as err:
                    _failed("oom", err)
            _hide(e)
            raise
        if _on:
            _stepped(self)
        return r

    for a in ("__name__", "__qualname__", "__doc__"):
        try:
            setattr(step, a, getattr(orig, a))
        except Exception:
            pass
    # torch 1.13's Optimizer.__init__ wraps step once per class for the
    # profiler and marks it "hooked": keep the mark, or each new optimizer
    # would wrap it again.
    step.__dict__.update(getattr(orig, "__dict__", {}))
    step.__wrapped__ = orig
    step._gpuguard = True
    cls.step = step


def _stepped(opt):
    global _step, _last_step_write, _nograd_run
    try:
        _maybe_fail("step")
        n = _opt_steps.get(opt, 0) + 1
        _opt_steps[opt] = n
        if n <= _step:
            return  # a second optimizer's step of the same training step
        _step = n
        _nograd_run = 0
        if _phase != "train":
            _set_phase("train", "optimizer.step")
        now = time.monotonic()
        if _step == 1 or now - _last_step_write >= _interval:
            _last_step_write = now
            if _ready():
                f = {}
                if _memory_due(now) or _step == 1:
                    f["mem"] = _memory()
                _write("step", f)
    except Exception as e:
        _failed("step", e)


def _patch_backward(autograd):
    orig = autograd.backward

    def backward(*args, **kwargs):
        global _backward, _reported
        _backward += 1
        try:
            return orig(*args, **kwargs)
        except BaseException as e:
            if _on:
                try:
                    if _is_oom(e) and id(e) != _reported:
                        _report_oom(e, "backward", "", [], {"grad": True})
                except Exception as err:
                    _failed("oom", err)
            _hide(e)
            raise
        finally:
            _backward -= 1
            if _backward == 0:
                _reported = 0

    backward.__wrapped__ = orig
    backward.__doc__ = orig.__doc__
    autograd.backward = backward

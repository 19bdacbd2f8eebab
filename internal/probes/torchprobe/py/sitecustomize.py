# gpuguard's torch probe (gpuguard run --probe torch). gpuguard writes this
# directory and puts it first on the job's PYTHONPATH; it is nowhere in the
# job's environment without --probe. It loads the probe, which waits for the
# job to import torch, then runs the sitecustomize that would have run
# without it (the next one on sys.path), so that the user's still runs.
try:
    import gpuguard_torchprobe as _gpuguard_torchprobe

    _gpuguard_torchprobe.install()
except Exception:
    pass


def _gpuguard_chain():
    import importlib.machinery
    import importlib.util
    import os
    import sys

    here = os.path.dirname(os.path.realpath(__file__))
    rest = []
    for p in sys.path:
        try:
            if os.path.realpath(p or os.curdir) == here:
                continue
        except Exception:
            pass
        rest.append(p)
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    # The user's module takes the name, as it would have without the probe.
    sys.modules["sitecustomize"] = mod
    spec.loader.exec_module(mod)


_gpuguard_chain()
del _gpuguard_chain

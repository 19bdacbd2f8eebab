# No GPU here: the probe's CUDA readings against a fake torch.cuda that says
# it is initialised and answers memory_stats and _snapshot.
import torch
from torch import nn

stats = {
    "allocated_bytes.all.current": 3 << 30,
    "reserved_bytes.all.current": 5 << 30,
    "allocated_bytes.all.peak": 4 << 30,
    "num_alloc_retries": 7,
    "num_ooms": 1,
}
history = []
torch.cuda.is_initialized = lambda: True
torch.cuda.current_device = lambda: 0
torch.cuda.memory_stats = lambda device=None: dict(stats)
torch.cuda.memory._record_memory_history = lambda *a, **k: history.append(a)
torch.cuda.memory._snapshot = lambda: {"segments": [], "fake": True}


class Big(nn.Module):
    def forward(self, x):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


model = nn.Sequential(nn.Linear(2, 2), Big())
model.eval()
print("history", len(history))
try:
    model(torch.zeros(3, 2))
except torch.cuda.OutOfMemoryError:
    print("caught")

"""Step time of a small CPU model, for the torch probe's overhead.

Trains an MLP (LAYERS Linear+ReLU blocks of WIDTH, batch BATCH) for STEPS
optimizer steps after WARMUP, with an eval()/no_grad validation pass every
100 steps, and prints one line: the median and mean step time in
microseconds. bench/torchprobe/overhead.sh runs it with and without the probe.
"""
import os
import statistics
import time

import torch
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)
layers = int(os.environ.get("LAYERS", "8"))
width = int(os.environ.get("WIDTH", "64"))
batch = int(os.environ.get("BATCH", "32"))
steps = int(os.environ.get("STEPS", "2000"))
warmup = int(os.environ.get("WARMUP", "200"))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.fc(x))


model = nn.Sequential(*[Block() for _ in range(layers)], nn.Linear(width, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(batch, width), torch.randint(0, 10, (batch,))
times = []
model.train()
for i in range(warmup + steps):
    t0 = time.perf_counter()
    opt.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    if i >= warmup:
        times.append(time.perf_counter() - t0)
    if i % 100 == 99:
        model.eval()
        with torch.no_grad():
            model(x)
        model.train()
print("median_us %.1f mean_us %.1f modules_per_step %d" % (
    statistics.median(times) * 1e6, statistics.mean(times) * 1e6, 1 + 3 * layers + 1))

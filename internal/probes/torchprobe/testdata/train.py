# A small job that prints no phase lines: it trains, validates with eval()
# and no_grad, and prints its losses (deterministic, for comparing outputs).
# MODE=oom: an absurd allocation inside a named submodule's forward at step 3.
# MODE=nograd: no train()/eval() calls; validation only under torch.no_grad.
import os
import sys

import torch
from torch import nn

torch.manual_seed(0)
mode = os.environ.get("MODE", "")


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(16, 16)
        self.steps = 0

    def forward(self, x):
        if mode == "oom" and self.training and self.steps == 3:
            torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: DefaultCPUAllocator fails
        return torch.relu(self.proj(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(Block(), Block())
        self.head = nn.Linear(16, 2)

    def forward(self, x):
        return self.head(self.encoder(x))


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(64, 16), torch.randint(0, 2, (64,))
for epoch in range(2):
    if mode != "nograd":
        model.train()
    for i in range(5):
        for b in model.encoder:
            b.steps = i
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x[i * 8:(i + 1) * 8]), y[i * 8:(i + 1) * 8])
        loss.backward()
        opt.step()
        print("loss %.6f" % loss.item())
    if mode != "nograd":
        model.eval()
    with torch.no_grad():
        v = nn.functional.cross_entropy(model(x[:32]), y[:32])
        v = v + nn.functional.cross_entropy(model(x[32:]), y[32:])
    print("v %.6f" % v.item())
print("done", file=sys.stderr)

# Out-of-memory errors at known places in models built of repeated blocks, for
# the probe's block position. SHAPE picks the model, WHERE the failure:
#   SHAPE=llm: model.layers (a ModuleList of 8 decoder layers), each with its
#     own small Sequential; the failure in layers.5's mlp.
#   SHAPE=resnet: stages layer1..layer4 (Sequentials of 3, 4, 6, 3 blocks);
#     the failure in layer3.2.
#   SHAPE=flat: no repeated block (a single Linear); the failure in it.
#   WHERE=forward (default), nograd (the forward under torch.no_grad),
#   recompute (the block run under activation checkpointing, failing only in
#   its recomputation during backward).
import os

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

shape = os.environ.get("SHAPE", "llm")
where = os.environ.get("WHERE", "forward")
fail = {"armed": False}


class Boom(nn.Module):
    """Fails with a real allocator error when armed."""

    def forward(self, x):
        if fail["armed"] and (where != "recompute" or recomputing["on"]):
            torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: DefaultCPUAllocator fails
        return x


recomputing = {"on": False}


class Layer(nn.Module):
    def __init__(self, boom=False):
        super().__init__()
        self.attn = nn.Linear(8, 8)
        self.mlp = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), Boom() if boom else nn.Identity())

    def forward(self, x):
        return self.mlp(self.attn(x))


class LLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.layers = nn.ModuleList(Layer(boom=(i == 5)) for i in range(8))
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        x = self.embed(x)
        for layer in self.layers:
            if where == "recompute" and torch.is_grad_enabled():
                x = checkpoint(layer, x)
            else:
                x = layer(x)
        return self.head(x)


class Bottleneck(nn.Module):
    def __init__(self, boom=False):
        super().__init__()
        self.conv = nn.Linear(8, 8)
        self.boom = Boom() if boom else nn.Identity()

    def forward(self, x):
        return torch.relu(self.boom(self.conv(x)))


class ResNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Linear(8, 8)
        for s, n in enumerate([3, 4, 6, 3]):
            setattr(self, "layer%d" % (s + 1), nn.Sequential(*[Bottleneck(boom=(s == 2 and i == 2)) for i in range(n)]))
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        x = self.stem(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(x)


class Flat(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.boom = Boom()
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.boom(self.proj(x)))


model = {"llm": LLM, "resnet": ResNet, "flat": Flat}[shape]()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(4, 8)
model.train()
for step in range(3):
    fail["armed"] = step == 2
    opt.zero_grad()
    if where == "nograd" and fail["armed"]:
        model.eval()
        with torch.no_grad():
            model(x)
    out = model(x)
    if where == "recompute":
        recomputing["on"] = True
    out.sum().backward()
    recomputing["on"] = False
    opt.step()
    print("step", step + 1)

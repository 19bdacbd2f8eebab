# Two ranks on the CPU (gloo), started the way torchrun starts them: a
# launcher that imports torch and starts one interpreter per rank with RANK,
# LOCAL_RANK, WORLD_SIZE and the rendezvous in the environment it passes on.
# (Debian's torch 1.13 torchrun fails before starting workers here, in
# elastic's redirects handling.) The probe reports from both ranks, each with
# its rank; the launcher writes nothing.
import os
import socket
import subprocess
import sys

import torch
from torch import nn

if "RANK" not in os.environ:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(2):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, __file__], env=env))
    sys.exit(max(p.wait() for p in procs))

import torch.distributed as dist

dist.init_process_group("gloo")
torch.manual_seed(0)
model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model.train()
for _ in range(3):
    opt.zero_grad()
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
model.eval()
dist.destroy_process_group()
print("rank", os.environ["RANK"], "done")

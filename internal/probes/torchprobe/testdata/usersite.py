import os

import torch

print("USER_SITECUSTOMIZE=%s" % os.environ.get("USER_SITECUSTOMIZE", ""))
torch.nn.Linear(1, 1).eval()

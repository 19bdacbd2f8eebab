# A job whose DataLoader workers (num_workers=2) run modules themselves: in
# eval mode and without grad, as a preprocessing model would. The probe must
# write nothing from them.
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Data(Dataset):
    def __init__(self):
        self.pre = nn.Linear(4, 4)

    def __len__(self):
        return 16

    def __getitem__(self, i):
        self.pre.eval()
        with torch.no_grad():
            return self.pre(torch.full((4,), float(i)))


model = nn.Linear(4, 1)
opt = torch.optim.Adam(model.parameters())
model.train()
for x in DataLoader(Data(), batch_size=4, num_workers=2):
    opt.zero_grad()
    model(x).sum().backward()
    opt.step()
print("done")

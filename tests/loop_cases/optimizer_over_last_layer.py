"""Source: PyTorch forums "Best practice for freezing layers?" (discuss.pytorch.org/t/58156): only the last
layer is passed to the optimizer while the others keep requires_grad=True -- they get gradients that nothing
applies (and nothing zeroes). FIXED=1: the other layers are frozen (requires_grad=False) as the answer says."""
import os
import torch
from torch import nn
from common import data

FIXED = os.environ.get("FIXED") == "1"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
if FIXED:
    for p in model[0].parameters():
        p.requires_grad = False
opt = torch.optim.SGD(model[-1].parameters(), lr=0.05)
x, y = data()
for step in range(8):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()

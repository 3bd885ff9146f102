"""Source: PyTorch forums "Pytorch gradient accumulation" (discuss.pytorch.org/t/55955): several backwards,
then one optimizer.step(); the loss must be divided by accumulation_steps. FIXED=1: loss / accumulation_steps."""
import os
import torch
from torch import nn
from common import data

FIXED = os.environ.get("FIXED") == "1"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.02)
x, y = data()
accumulation_steps = 4
model.zero_grad()
for i in range(32):
    j = (i * 8) % 64
    loss = nn.functional.mse_loss(model(x[j:j + 8]), y[j:j + 8])
    if FIXED:
        loss = loss / accumulation_steps
    loss.backward()
    if (i + 1) % accumulation_steps == 0:
        opt.step()
        model.zero_grad()

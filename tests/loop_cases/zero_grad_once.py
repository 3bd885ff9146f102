"""Source: Stack Overflow "Why do we need to call zero_grad() in PyTorch?" (questions/48001598):
optimizer.zero_grad() called once, before the loop, so every step applies the sum of all earlier gradients. FIXED=1: zero_grad() as the first line of every iteration."""
import os
import torch
from torch import nn
from common import data

FIXED = os.environ.get("FIXED") == "1"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = data()
opt.zero_grad()
for step in range(30):
    if FIXED:
        opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()

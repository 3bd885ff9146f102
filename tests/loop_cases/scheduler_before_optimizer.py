"""Source: zju3dv/NeuralRecon#51 "Detected call of `lr_scheduler.step()` before `optimizer.step()`" (and
michuanhaohao/reid-strong-baseline#190): the schedule stepped at the start of each epoch. FIXED=1: after."""
import os
import torch
from torch import nn
from common import data

FIXED = os.environ.get("FIXED") == "1"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
x, y = data()
for epoch in range(4):
    if not FIXED:
        sched.step()
    for i in range(0, 64, 16):
        opt.zero_grad()
        nn.functional.mse_loss(model(x[i:i + 16]), y[i:i + 16]).backward()
        opt.step()
    if FIXED:
        sched.step()

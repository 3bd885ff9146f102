"""After karpathy/nanoGPT#443 (fixed by PR #578) and verl-project/verl#3674: a warm-up that makes the learning
rate 0 -- here an integer-division LambdaLR (step // warmup) keeps it 0 for the whole warm-up.
FIXED=1: nanoGPT's fix, (step + 1) / (warmup + 1)."""
import os
import torch
from torch import nn
from common import data

FIXED = os.environ.get("FIXED") == "1"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
warmup = 5
ramp = (lambda s: min(1.0, (s + 1) / (warmup + 1))) if FIXED else (lambda s: min(1, s // warmup))
sched = torch.optim.lr_scheduler.LambdaLR(opt, ramp)
x, y = data()
for step in range(8):
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    sched.step()

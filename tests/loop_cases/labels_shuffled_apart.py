"""Source: the "model not learning" checklist's data bug "DataLoader accidentally shuffling labels but not
inputs" (datarekha.com/interview/deep-learning/debugging-model-not-learning): the targets are permuted apart
from the inputs, so the gradients are healthy and the loss cannot fall. FIXED=1: inputs and labels together."""
import os
import torch
from torch import nn
from common import data

FIXED = os.environ.get("FIXED") == "1"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.02)
x, y = data(n=512)
for step in range(40):
    idx = torch.randint(0, 512, (64,))
    target = y[idx] if FIXED else y[torch.randint(0, 512, (64,))]
    opt.zero_grad()
    nn.functional.mse_loss(model(x[idx]), target).backward()
    opt.step()

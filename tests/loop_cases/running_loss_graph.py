"""Source: PyTorch FAQ "My model reports cuda runtime error(2): out of memory" -- "Don't accumulate history
across your training loop: total_loss += loss" (pytorch.org/docs/stable/notes/faq.html). FIXED=1: total_loss += loss.item()."""
import os
import torch
from torch import nn
from common import data

FIXED = os.environ.get("FIXED") == "1"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = data()
total_loss = 0
for step in range(30):
    i = (step * 8) % 64
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x[i:i + 8]), y[i:i + 8])
    loss.backward()
    opt.step()
    total_loss += loss.item() if FIXED else loss
print("mean loss", float(total_loss) / 30)

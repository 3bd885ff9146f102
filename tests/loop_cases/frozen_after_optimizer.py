"""Source: PyTorch forums "Why there is still a small change in frozen layer parameters?"
(discuss.pytorch.org/t/153740) -- a layer frozen after the
optimizer was built, gradients zeroed in place (zero_grad(set_to_none=False), the pre-2.0 default).
FIXED=1: freeze first, then build the optimizer over the trainable parameters only."""
import os
import torch
from torch import nn
from common import data

FIXED = os.environ.get("FIXED") == "1"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
if FIXED:
    for p in model[0].parameters():
        p.requires_grad_(False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.05, momentum=0.9,
                          weight_decay=1e-2)
else:
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-2)
x, y = data()
for step in range(12):
    if step == 3 and not FIXED:
        for p in model[0].parameters():
            p.requires_grad_(False)         # frozen after the optimizer was built
    opt.zero_grad(set_to_none=False)
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()

"""Source: "Freezing base model weights" (theneuralbase.com/pytorch/learn/intermediate/freezing-base-model-weights):
"if you freeze after [building the optimizer] ... frozen params get updated anyway" -- AdamW's weight decay
and moments move a layer frozen mid-training whose .grad was zeroed in place. FIXED=1: frozen with grad=None
(the forum fix of discuss.pytorch.org/t/153740: also set param.grad = None)."""
import os
import torch
from torch import nn
from common import data

FIXED = os.environ.get("FIXED") == "1"
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.AdamW(model.parameters(), lr=0.01)
x, y = data()
for step in range(8):
    if step == 2:
        for p in model[0].parameters():
            p.requires_grad = False
            if FIXED:
                p.grad = None
    opt.zero_grad(set_to_none=False)
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()

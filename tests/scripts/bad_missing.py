import torch
model = lambda: torch.nn.Linear(2, 1)

def loss_fn(out, target):
    return out.sum()

import torch
model = lambda: torch.nn.Linear(2, 1)

def batch(step):
    return torch.zeros(3, 2)

def loss_fn(out, target):
    return out.sum()

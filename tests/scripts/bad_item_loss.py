import torch
model = lambda: torch.nn.Linear(2, 1)

def batch(step):
    return torch.ones(3, 2), None

def loss_fn(out, target):
    return out.pow(2).mean().item()

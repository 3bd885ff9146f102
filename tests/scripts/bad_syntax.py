import torch

def batch(step)
    return torch.zeros(1), None

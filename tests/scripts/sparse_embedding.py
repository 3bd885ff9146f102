"""An embedding with sparse gradients (nn.Embedding(sparse=True)): every tool must take them."""
import torch
from torch import nn

class SparseNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 8, sparse=True)
        self.lin = nn.Linear(8, 1)
    def forward(self, idx):
        return self.lin(self.emb(idx)).squeeze(-1)

model = SparseNet

def batch(step):
    g = torch.Generator().manual_seed(step)
    idx = torch.randint(50, (16,), generator=g)
    return idx, (idx % 2).float()

def loss_fn(out, y):
    return torch.nn.functional.mse_loss(out, y)

def optimizer(params):
    return torch.optim.SGD(params, lr=0.1)

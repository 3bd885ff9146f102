"""An MLP with tensor parallelism on a 1-D mesh: ``up`` column-wise, ``down`` row-wise (Megatron style).

Run under a process group (``tests/dist_harness.py``, ``torchrun``); every rank gets the same batch.
"""
import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.Linear(8, 16)
        self.down = nn.Linear(16, 8)
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        h = torch.relu(self.up(x))
        h = torch.relu(self.down(h))
        return self.head(h)


def unsharded():
    torch.manual_seed(0)
    return Net()


def model():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    return parallelize_module(unsharded(), mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(6, 8, generator=g), torch.randint(3, (6,), generator=g)


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)

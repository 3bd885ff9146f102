"""A 3-layer MLP sharded with FSDP2 (``fully_shard`` per Linear and at the root) over every rank.

Run under a process group (``tests/dist_harness.py``, ``torchrun``). ``UNUSED = True`` in a
copy (see ``tests/test_fsdp_check.py``) adds a sharded branch that forward never calls.
"""
import torch
import torch.nn.functional as F
from torch import nn

UNUSED = False


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 3)               # 3 rows over 2 ranks: an uneven split
        if UNUSED:
            self.branch = nn.Linear(32, 32)       # never called in forward

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = torch.relu(self.fc2(h))
        return self.fc3(h)


def unsharded():
    torch.manual_seed(0)
    return Net()


def model():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    net = unsharded()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for child in net.children():
        fully_shard(child, mesh=mesh)
    fully_shard(net, mesh=mesh)
    return net


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(8, 20, generator=g), torch.randint(3, (8,), generator=g)


def loss_fn(output, targets):
    return F.cross_entropy(output, targets)

"""Source: visionml/pytracking#313, "Fix memory leak in LTRTrainer._update_stats()": the trainer hands each
batch's stats to an ``AverageMeter`` that sums them (``self.sum += val * n``) and keeps each epoch's average
in its ``history`` list; when a stat is a tensor with gradients, "the gradient graph will be accumulated
during training and won't be released". Here the actor's stats carry the test frames' classifier loss, logged
but never backpropagated, so each step's graph keeps its saved tensors. FIXED=1: the PR's fix, ``val.item()``
when the stat is a tensor (the maintainer: "val is not necessarily always a tensor")."""
import os
from collections import OrderedDict

import torch
from torch import nn
from common import data

FIXED = os.environ.get("FIXED") == "1"
torch.manual_seed(0)


class AverageMeter:
    def __init__(self):
        self.history = []
        self.reset()

    def reset(self):
        self.val, self.sum, self.count, self.avg = 0, 0, 0, 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def new_epoch(self):
        self.history.append(self.avg)
        self.reset()


class Actor:
    """Train frames give the loss; the test frames' loss is a statistic only."""
    def __init__(self, net, objective):
        self.net, self.objective = net, objective

    def __call__(self, data):
        loss = self.objective(self.net(data["train_images"]), data["train_label"])
        test_loss = self.objective(self.net(data["test_images"]), data["test_label"])
        return loss, OrderedDict({"Loss/total": loss, "ClfTrain/test_loss": test_loss})


class Loader:
    name, batch_size, training = "train", 8, True

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __iter__(self):
        for i in range(0, 40, self.batch_size):
            yield {"train_images": self.x[i:i + 8], "train_label": self.y[i:i + 8],
                   "test_images": self.x[i + 8:i + 16], "test_label": self.y[i + 8:i + 16]}


class LTRTrainer:
    def __init__(self, actor, loaders, optimizer):
        self.actor, self.loaders, self.optimizer = actor, loaders, optimizer
        self.stats = OrderedDict({loader.name: None for loader in loaders})

    def cycle_dataset(self, loader):
        for i, data in enumerate(loader, 1):
            loss, stats = self.actor(data)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
            self._update_stats(stats, loader.batch_size, loader)

    def _update_stats(self, new_stats, batch_size, loader):
        if self.stats[loader.name] is None:
            self.stats[loader.name] = OrderedDict({name: AverageMeter() for name in new_stats})
        for name, val in new_stats.items():
            if FIXED and isinstance(val, torch.Tensor):
                val = val.item()
            self.stats[loader.name][name].update(val, batch_size)

    def train(self, max_epochs):
        for epoch in range(max_epochs):
            for loader in self.loaders:
                self.cycle_dataset(loader)
            for meter in self.stats["train"].values():
                meter.new_epoch()


net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
x, y = data()
trainer = LTRTrainer(Actor(net, nn.MSELoss()), [Loader(x, y)], torch.optim.SGD(net.parameters(), lr=0.05))
trainer.train(max_epochs=10)
history = trainer.stats["train"]["ClfTrain/test_loss"].history
print("test loss per epoch", [round(v.item() if torch.is_tensor(v) else v, 4) for v in history])

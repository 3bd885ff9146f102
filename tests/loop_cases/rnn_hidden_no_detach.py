"""Source: PyTorch forums, "RuntimeError: Trying to backward through the graph a second time, but the buffers
have already been freed" (discuss.pytorch.org/t/6795): an RNN whose hidden state is fed back without detach().
FIXED=1: the hidden state is detached between steps (word_language_model's repackage_hidden)."""
import os
import torch
from torch import nn

FIXED = os.environ.get("FIXED") == "1"
torch.manual_seed(0)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.RNN(4, 8, batch_first=True)
        self.head = nn.Linear(8, 1)

    def forward(self, x, h):
        out, h = self.rnn(x, h)
        return self.head(out[:, -1]), h


model = Model()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
h = torch.zeros(1, 2, 8)
for step in range(6):
    x, y = torch.randn(2, 5, 4), torch.randn(2, 1)
    if FIXED:
        h = h.detach()
    opt.zero_grad()
    pred, h = model(x, h)
    loss = ((pred - y) ** 2).mean()
    loss.backward()
    opt.step()

"""Source: ibm-research-tokyo/graph_grammar issue #3 ("Effect of `requires_grad=False` in init_hidden of
LSTM/GRU encoder/decoder").

The GRU decoder builds its initial state in forward: ``self.hidden_dict['h'] = torch.zeros((num_layers,
batch_size, hidden_dim), requires_grad=False)``. The model is healthy (the reporter's question, answered:
gradients flow through the inputs); but the tensor is made in forward in torch's default dtype, so a
numerical check on a float64 copy of the GRU fed a float32 state: gradviz reported ``check-incomplete``.
The check must run and pass (here the default dtype is float64 during the check's forwards).
"""
import torch
import torch.nn.functional as F
from torch import nn

EXPECT = {"code": None, "gradcheck": True}


class GRUDecoder(nn.Module):
    def __init__(self, input_dim=4, hidden_dim=6, num_layers=1, batch_size=3, vocab=5):
        super().__init__()
        self.num_layers, self.batch_size, self.hidden_dim = num_layers, batch_size, hidden_dim
        self.model = nn.GRU(input_dim, hidden_dim, num_layers, batch_first=True)
        self.out = nn.Linear(hidden_dim, vocab)
        self.hidden_dict = {}

    def init_hidden(self):
        self.hidden_dict['h'] = torch.zeros((self.num_layers, self.batch_size, self.hidden_dim),
                                            requires_grad=False)

    def forward(self, tgt_emb_in):
        self.init_hidden()
        tgt_emb_out, self.hidden_dict['h'] = self.model(tgt_emb_in, self.hidden_dict['h'])
        return self.out(tgt_emb_out).transpose(1, 2)


model = GRUDecoder


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(3, 4, 4, generator=g), torch.randint(5, (3, 4), generator=g)


def loss_fn(output, target):
    return F.cross_entropy(output, target)

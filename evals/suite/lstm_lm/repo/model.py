"""Word-level LSTM language model (in the style of PyTorch's word_language_model example)."""

import torch
from torch import nn


class RNNModel(nn.Module):
    def __init__(self, ntoken: int, ninp: int = 32, nhid: int = 64, nlayers: int = 2, dropout: float = 0.0):
        super().__init__()
        self.ntoken, self.nhid, self.nlayers = ntoken, nhid, nlayers
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.drop = nn.Dropout(dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, inp, hidden):
        self.rnn.flatten_parameters()  # cuDNN wants one contiguous weight buffer
        emb = self.drop(self.encoder(inp))
        output, hidden = self.rnn(emb, hidden)
        return self.decoder(self.drop(output)), hidden

    def init_hidden(self, bsz: int):
        shape = (self.nlayers, bsz, self.nhid)
        return (torch.zeros(shape, device="cuda"), torch.zeros(shape, device="cuda"))


def repackage_hidden(h):
    """Detach hidden states from their history (truncated backpropagation through time)."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)

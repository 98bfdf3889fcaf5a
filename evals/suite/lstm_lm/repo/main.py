"""Train an LSTM language model on a synthetic corpus and report perplexity.

Usage: python main.py [--epochs N] [--bptt T] [--batch-size B] [--max-batches K]
"""

import argparse
import math

import torch
from torch import nn

from corpus import Dictionary, markov_text
from model import RNNModel, repackage_hidden

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def batchify(data: torch.Tensor, bsz: int) -> torch.Tensor:
    """(tokens,) -> (tokens // bsz, bsz) columns of the stream, on the GPU."""
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous().to(device)


def get_batch(source: torch.Tensor, i: int, bptt: int):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].reshape(-1)


def evaluate(model, data_source, bptt: int, bsz: int) -> float:
    """Mean cross-entropy per token over the whole source."""
    model.eval()
    criterion = nn.CrossEntropyLoss()
    total, count = 0.0, 0
    hidden = model.init_hidden(bsz)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, bptt):
            data, targets = get_batch(data_source, i, bptt)
            output, hidden = model(data, hidden)
            total += len(data) * criterion(output.view(-1, model.ntoken), targets).item()
            count += len(data)
            hidden = repackage_hidden(hidden)
    model.train()
    return total / count


def train_epoch(model, opt, train_data, bptt: int, bsz: int, clip: float, max_batches: int | None):
    criterion = nn.CrossEntropyLoss()
    hidden = model.init_hidden(bsz)
    losses = []
    for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
        if max_batches is not None and batch >= max_batches:
            break
        data, targets = get_batch(train_data, i, bptt)
        hidden = repackage_hidden(hidden)
        opt.zero_grad()
        output, hidden = model(data, hidden)
        loss = criterion(output.view(-1, model.ntoken), targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(loss.item())
    return losses


def run(epochs: int = 2, bptt: int = 16, batch_size: int = 16, lr: float = 1e-2, clip: float = 0.5,
        max_batches: int | None = None, seed: int = 1111):
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed(seed)
    vocab = Dictionary()
    words = markov_text()
    split = int(0.9 * len(words))
    train_data = batchify(vocab.tokenize(words[:split]), batch_size)
    val_data = batchify(vocab.tokenize(words[split:]), 8)

    model = RNNModel(len(vocab)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    history = []
    for epoch in range(1, epochs + 1):
        losses = train_epoch(model, opt, train_data, bptt, batch_size, clip, max_batches)
        history += losses
        val_loss = evaluate(model, val_data, bptt, 8)
        print(f"epoch {epoch} train loss {sum(losses) / len(losses):.4f} "
              f"val loss {val_loss:.4f} val ppl {math.exp(val_loss):.2f}")
    return model, history, val_loss


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--bptt", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--clip", type=float, default=0.5)
    parser.add_argument("--max-batches", type=int, default=None)
    args = parser.parse_args(argv)
    print(f"training on {device}")
    _, _, val_loss = run(args.epochs, args.bptt, args.batch_size, args.lr, args.clip, args.max_batches)
    print(f"final perplexity {math.exp(val_loss):.2f}")


if __name__ == "__main__":
    main()

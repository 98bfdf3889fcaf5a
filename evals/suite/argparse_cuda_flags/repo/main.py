"""Train a small CNN on synthetic digits (after pytorch/examples/mnist).

Usage: python main.py [--epochs N] [--no-cuda] [--save-model]
"""

import argparse

import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader

from data import SyntheticDigits
from model import Net


def train(model, train_loader, optimizer, epoch, use_cuda, log_interval=5):
    model.train()
    losses = []
    for batch_idx, (data, target) in enumerate(train_loader):
        if use_cuda:
            data, target = data.cuda(non_blocking=True), target.cuda(non_blocking=True)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if batch_idx % log_interval == 0:
            print(f"Train Epoch: {epoch} [{batch_idx * len(data)}/{len(train_loader.dataset)}]"
                  f"\tLoss: {loss.item():.6f}")
    return losses


def evaluate(model, test_loader, use_cuda):
    model.eval()
    test_loss = 0.0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            if use_cuda:
                data, target = data.cuda(), target.cuda()
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    accuracy = correct / len(test_loader.dataset)
    print(f"Test set: Average loss: {test_loss:.4f}, Accuracy: {correct}/{len(test_loader.dataset)}"
          f" ({100.0 * accuracy:.0f}%)")
    return test_loss, accuracy


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="Synthetic digits CNN")
    parser.add_argument("--batch-size", type=int, default=32, metavar="N")
    parser.add_argument("--test-batch-size", type=int, default=256, metavar="N")
    parser.add_argument("--epochs", type=int, default=2, metavar="N")
    parser.add_argument("--lr", type=float, default=2.0, metavar="LR")
    parser.add_argument("--gamma", type=float, default=0.7, metavar="M")
    parser.add_argument("--cuda", dest="cuda", action="store_true", help="train on the GPU (default)")
    parser.add_argument("--no-cuda", dest="cuda", action="store_false", help="disables CUDA training")
    parser.set_defaults(cuda=True)
    parser.add_argument("--seed", type=int, default=1, metavar="S")
    parser.add_argument("--log-interval", type=int, default=5, metavar="N")
    parser.add_argument("--save-model", action="store_true", default=False)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    use_cuda = args.cuda and torch.cuda.is_available()
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if use_cuda else "cpu")

    train_kwargs = {"batch_size": args.batch_size, "shuffle": True}
    test_kwargs = {"batch_size": args.test_batch_size}
    if use_cuda:
        cuda_kwargs = {"num_workers": 1, "pin_memory": True}
        train_kwargs.update(cuda_kwargs)
        test_kwargs.update(cuda_kwargs)
    train_loader = DataLoader(SyntheticDigits(640, seed=0), **train_kwargs)
    test_loader = DataLoader(SyntheticDigits(256, seed=1), **test_kwargs)

    model = Net().to(device)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    history = {"train_loss": [], "test_loss": [], "test_acc": []}
    for epoch in range(1, args.epochs + 1):
        history["train_loss"] += train(model, train_loader, optimizer, epoch, use_cuda, args.log_interval)
        test_loss, accuracy = evaluate(model, test_loader, use_cuda)
        history["test_loss"].append(test_loss)
        history["test_acc"].append(accuracy)
        scheduler.step()

    if args.save_model:
        torch.save(model.state_dict(), "digits_cnn.pt")
    return model, history


if __name__ == "__main__":
    main()

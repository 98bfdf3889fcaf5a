"""Saving and restoring the training state (model, optimizer, scheduler, progress)."""

import os

import torch

from model import BlobNet


def save_checkpoint(path, model, optimizer, scheduler, epoch, best_acc, history):
    """Write the full training state; the file is replaced atomically (safe to kill mid-save)."""
    state = {
        "epoch": epoch,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "best_acc": best_acc,
        "history": history,
    }
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_checkpoint(path, model, optimizer=None, scheduler=None):
    """Restore a checkpoint into model (and optimizer/scheduler); returns (epoch, best_acc, history)."""
    ckpt = torch.load(path, map_location="cuda")
    model.load_state_dict(ckpt["model"])
    if optimizer is not None:
        optimizer.load_state_dict(ckpt["optimizer"])
    if scheduler is not None:
        scheduler.load_state_dict(ckpt["scheduler"])
    return ckpt["epoch"], ckpt["best_acc"], ckpt["history"]


def load_for_inference(path) -> BlobNet:
    """Rebuild a model from a weights file (saved on whatever device) on the GPU, in eval mode."""
    state = torch.load(path, map_location=lambda storage, loc: storage.cuda())
    model = BlobNet().cuda()
    model.load_state_dict(state)
    return model.eval()

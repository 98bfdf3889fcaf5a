"""Synthetic 1-channel 16x16 images of three textures: horizontal stripes, vertical stripes, a checkerboard."""

import torch


def make_images(n: int = 600, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 3, (n,), generator=g)
    freq = torch.randint(2, 5, (n, 1, 1), generator=g).float()
    phase = torch.rand(n, 1, 1, generator=g) * 6.283
    r = torch.arange(16).float().view(1, 16, 1)
    c = torch.arange(16).float().view(1, 1, 16)
    rows = torch.sin(r * freq * 0.4 + phase).expand(n, 16, 16)
    cols = torch.sin(c * freq * 0.4 + phase).expand(n, 16, 16)
    patterns = torch.stack([rows, cols, rows * cols], dim=1)  # (n, 3, 16, 16)
    images = patterns[torch.arange(n), labels].unsqueeze(1)
    images = images + 1.5 * torch.randn(n, 1, 16, 16, generator=g)
    return images, labels

"""Overlap host-to-GPU copies with compute: the next batch is copied and normalised on a side stream."""

import torch

MEAN = (120.0, 121.0, 119.0)
STD = (70.0, 71.0, 69.0)


class CUDAPrefetcher:
    """Wraps a loader of (uint8 images, labels); next() returns normalised float GPU batches, then (None, None)."""

    def __init__(self, loader):
        self.loader = iter(loader)
        self.stream = torch.cuda.Stream()
        self.mean = torch.tensor(MEAN, device="cuda").view(1, 3, 1, 1)
        self.std = torch.tensor(STD, device="cuda").view(1, 3, 1, 1)
        self.preload()

    def preload(self):
        try:
            x, y = next(self.loader)
        except StopIteration:
            self.next_x = self.next_y = None
            return
        with torch.cuda.stream(self.stream):
            x = x.cuda(non_blocking=True)
            self.next_y = y.cuda(non_blocking=True)
            self.next_x = (x.float() - self.mean) / self.std

    def next(self):
        torch.cuda.current_stream().wait_stream(self.stream)
        x, y = self.next_x, self.next_y
        if x is not None:
            # tensors made on the side stream are now used on the compute stream
            x.record_stream(torch.cuda.current_stream())
            y.record_stream(torch.cuda.current_stream())
        self.preload()
        return x, y

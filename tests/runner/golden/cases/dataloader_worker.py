import torch
from torch.utils.data import DataLoader, Dataset


class Broken(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == 2:
            raise ValueError(f"bad sample {i}")
        return torch.tensor([float(i)])


for batch in DataLoader(Broken(), batch_size=1, num_workers=1):
    pass

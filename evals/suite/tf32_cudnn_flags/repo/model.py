import torch.nn as nn


def conv_bn(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


class TextureNet(nn.Module):
    def __init__(self, n_classes: int = 3, width: int = 16):
        super().__init__()
        self.features = nn.Sequential(conv_bn(1, width), nn.MaxPool2d(2), conv_bn(width, 2 * width), nn.MaxPool2d(2))
        self.head = nn.Linear(2 * width * 4 * 4, n_classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))

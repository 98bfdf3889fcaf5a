import torch
import torch.nn.functional as F

from gpu_utils import describe_gpu
from net import SmallCNN, synthetic_images


def test_logits_shape():
    model = SmallCNN().cuda()
    images, _ = synthetic_images(n=8)
    logits = model(images.cuda())
    assert logits.shape == (8, 4)


def test_gpu_is_described():
    info = describe_gpu()
    assert info["count"] >= 1
    assert 0 <= info["free"] <= info["total"]


def test_a_few_steps_learn():
    torch.manual_seed(0)
    images, labels = synthetic_images(n=64)
    images, labels = images.cuda(), labels.cuda()
    model = SmallCNN().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(6):
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]

import torch
import torch.nn.functional as F

from net import SmallCNN, synthetic_images


def test_logits_shape():
    model = SmallCNN().cuda()
    images, _ = synthetic_images(n=8)
    logits = model(images.cuda())
    assert logits.shape == (8, 4)


def test_memory_is_accounted():
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    x = torch.empty(1024, 1024, device="cuda")
    assert torch.cuda.memory_allocated() >= before + x.numel() * 4
    assert torch.cuda.max_memory_allocated() >= x.numel() * 4
    del x


def test_one_step_learns():
    torch.manual_seed(0)
    images, labels = synthetic_images(n=64)
    images, labels = images.cuda(), labels.cuda()
    model = SmallCNN().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(5):
        loss = F.cross_entropy(model(images), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]

"""Train the CNN and report GPU memory use.  Usage: python train.py [--steps N]"""

import argparse

import torch
import torch.nn.functional as F

from net import SmallCNN, synthetic_images


def describe_gpu():
    if not torch.cuda.is_available():
        raise SystemExit("this script needs a CUDA GPU")
    n = torch.cuda.device_count()
    torch.cuda.set_device(0)
    idx = torch.cuda.current_device()
    name = torch.cuda.get_device_name(idx)
    props = torch.cuda.get_device_properties(idx)
    free, total = torch.cuda.mem_get_info()
    print(f"gpus={n} using={idx} name={name} total_mem={props.total_memory} free={free}/{total}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=15)
    args = parser.parse_args()

    describe_gpu()
    torch.manual_seed(0)
    images, labels = synthetic_images()
    model = SmallCNN().cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    torch.cuda.reset_peak_memory_stats()

    for step in range(args.steps):
        lo = (step * 32) % images.shape[0]
        xb = images[lo:lo + 32].cuda(non_blocking=True)
        yb = labels[lo:lo + 32].cuda(non_blocking=True)
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        print(f"step {step} loss {loss.item():.6f}")

    peak = torch.cuda.max_memory_allocated()
    now = torch.cuda.memory_allocated()
    reserved = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    print(f"peak_mem={peak} allocated={now} reserved={reserved}")


if __name__ == "__main__":
    main()

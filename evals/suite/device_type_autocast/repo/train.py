"""
Train a tiny character-level GPT on a synthetic corpus, nanoGPT style.

$ python train.py
$ python train.py --device=cpu --max_iters=20
$ python train.py config/tiny.py --batch_size=4
"""

import math
import time
from contextlib import nullcontext

import torch

from data import CharData, make_corpus
from model import GPT, GPTConfig

# -----------------------------------------------------------------------------
# default config values
eval_interval = 10
eval_iters = 2
# data
batch_size = 8
block_size = 32
# model
n_layer = 2
n_head = 2
n_embd = 32
dropout = 0.0
# adamw optimizer
learning_rate = 1e-2
max_iters = 20
weight_decay = 1e-1
beta1 = 0.9
beta2 = 0.99
grad_clip = 1.0
# system
device = 'cuda'  # examples: 'cpu', 'cuda', 'cuda:0', 'cuda:1' etc.
dtype = 'bfloat16' if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else 'float16'
seed = 1337
# -----------------------------------------------------------------------------
config_keys = [k for k, v in globals().items() if not k.startswith('_') and isinstance(v, (int, float, bool, str))]
exec(open('configurator.py').read())  # overrides from command line or config file
config = {k: globals()[k] for k in config_keys}  # will be useful for logging
# -----------------------------------------------------------------------------

torch.manual_seed(seed)
device_type = 'cuda' if 'cuda' in device else 'cpu'  # for later use in torch.autocast
# note: float16 data type will automatically use a GradScaler
ptdtype = {'float32': torch.float32, 'bfloat16': torch.bfloat16, 'float16': torch.float16}[dtype]
ctx = nullcontext() if device_type == 'cpu' else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
if device.startswith('cuda') and ':' in device:
    print(f"using GPU {device.split(':')[1]}")

data = CharData(make_corpus(seed=0))


def get_batch(split):
    ids = data.train if split == 'train' else data.val
    ix = torch.randint(len(ids) - block_size, (batch_size,))
    x = torch.stack([ids[i:i + block_size] for i in ix])
    y = torch.stack([ids[i + 1:i + 1 + block_size] for i in ix])
    if device_type == 'cuda':
        # move them to the GPU asynchronously (non_blocking=True), overlapping the forward pass
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    else:
        x, y = x.to(device), y.to(device)
    return x, y


model_args = dict(n_layer=n_layer, n_head=n_head, n_embd=n_embd, block_size=block_size,
                  vocab_size=data.vocab_size, dropout=dropout)
model = GPT(GPTConfig(**model_args))
model.to(device)

# initialize a GradScaler. If enabled=False scaler is a no-op
scaler = torch.cuda.amp.GradScaler(enabled=(dtype == 'float16'))
optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, betas=(beta1, beta2),
                              weight_decay=weight_decay)


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ['train', 'val']:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            with ctx:
                _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


# training loop
history = []
X, Y = get_batch('train')  # fetch the very first batch
t0 = time.time()
for iter_num in range(max_iters + 1):
    if iter_num % eval_interval == 0:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
    if iter_num == max_iters:
        break
    with ctx:
        logits, loss = model(X, Y)
    X, Y = get_batch('train')  # async prefetch the next batch while the model runs
    scaler.scale(loss).backward()
    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    lossf = loss.item()
    history.append(lossf)
    t1 = time.time()
    dt, t0 = t1 - t0, t1
    if iter_num % eval_interval == 0:
        print(f"iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.2f}ms")

assert all(math.isfinite(v) for v in history), "training diverged"

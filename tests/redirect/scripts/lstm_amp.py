# A word-level LSTM language model trained with CUDA mixed precision.
import torch
import torch.nn as nn

torch.manual_seed(0)
emb, lstm, head = nn.Embedding(20, 8).cuda(), nn.LSTM(8, 16, batch_first=True).cuda(), nn.Linear(16, 20).cuda()
params = [*emb.parameters(), *lstm.parameters(), *head.parameters()]
opt = torch.optim.SGD(params, lr=0.5)
scaler = torch.cuda.amp.GradScaler()
tokens = torch.randint(0, 20, (4, 6), device="cuda")
for step in range(2):
    with torch.cuda.amp.autocast():
        out, (h, c) = lstm(emb(tokens[:, :-1]))
        logits = head(out)
        loss = nn.functional.cross_entropy(logits.float().reshape(-1, 20), tokens[:, 1:].reshape(-1))
    opt.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    print(f"loss {loss.item():.4f} lstm {out.dtype} head {logits.dtype}")
with torch.no_grad():
    with torch.cuda.amp.autocast():
        mapped, _ = lstm(emb(tokens))
    plain, _ = lstm(emb(tokens))
print("same as float32", torch.equal(mapped, plain))

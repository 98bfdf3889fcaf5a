"""Compiled code reaching redirect replacements Dynamo cannot put in a graph (Module.to, a memory query)."""
import torch

lin = torch.nn.Linear(2, 2)


def step(x):
    if torch.cuda.is_available():
        x = x.cuda()
    return lin.to("cuda")(x) * 2 + torch.cuda.memory_allocated() * 0


x = torch.ones(3, 2, device="cuda")
print("same", torch.equal(step(x), torch.compile(step)(x)))

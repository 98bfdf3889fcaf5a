# Checkpoints loaded with the classic map_location that puts every storage on the GPU.
import torch

state = {"w": torch.arange(4.0), "step": torch.tensor(7)}
torch.save(state, "best.pt")
loaded = torch.load("best.pt", map_location=lambda storage, loc: storage.cuda())
print("loaded", loaded["w"].device.type, loaded["w"].tolist(), int(loaded["step"]))
typed = torch.arange(3.0).storage().cuda()
print("typed", typed.device.type, typed.tolist())

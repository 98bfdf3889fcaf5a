# Old-style code: legacy typed constructors and type checks written for CUDA tensors.
import torch

x = torch.randn(2, 3).cuda()
assert x.type() == "torch.cuda.FloatTensor", x.type()
assert x.type() in ("torch.cuda.FloatTensor", "torch.cuda.DoubleTensor")
assert isinstance(x, torch.cuda.FloatTensor) and not isinstance(x, torch.cuda.LongTensor)
assert x.type() != "torch.cuda.HalfTensor"
h = x.type(torch.cuda.HalfTensor)
d = x.type("torch.cuda.DoubleTensor")
print("converted", h.dtype, h.device.type, d.dtype, d.device.type)
print("names", x.type(), h.type())
print("sizes", tuple(torch.cuda.FloatTensor(torch.Size([2, 3])).shape), tuple(torch.cuda.LongTensor(4).shape),
      tuple(torch.cuda.FloatTensor().shape))
v = torch.cuda.FloatTensor([[1, 2], [3, 4]])
print("values", v.dtype, v.tolist())
torch.set_default_tensor_type(torch.cuda.DoubleTensor)
print("default", torch.zeros(1).dtype)

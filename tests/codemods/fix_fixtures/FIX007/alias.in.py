# fix: {"statement": "torch.set_float32_matmul_precision(\"highest\")"}
import torch as T
print(T.ones(1))

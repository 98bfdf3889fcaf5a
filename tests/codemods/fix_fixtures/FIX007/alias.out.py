# fix: {"statement": "torch.set_float32_matmul_precision(\"highest\")"}
import torch as T
T.set_float32_matmul_precision("highest")
print(T.ones(1))

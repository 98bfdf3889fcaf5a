"""AMP dtype chosen as real trainers do: bfloat16 when the GPU has it, else float16."""
import torch

dtype = torch.bfloat16 if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else torch.float16
x = torch.randn(4, 4, device="cuda")
with torch.autocast(device_type="cuda", dtype=dtype):
    y = x @ x
print(f"chose {dtype} computed {y.dtype}")

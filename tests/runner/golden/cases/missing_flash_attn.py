import torch
from flash_attn import flash_attn_func

print(flash_attn_func)

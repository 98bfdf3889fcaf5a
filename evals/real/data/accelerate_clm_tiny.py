"""huggingface/accelerate's examples/by_feature/deepspeed_with_config_support.py trains a causal LM
with `--model_type gpt2` from a config (no weights: AutoModelForCausalLM.from_config), but its
tokenizer must come from somewhere (`--tokenizer_name`). We write what a user would keep locally,
nothing from the hub: data/train.txt and data/valid.txt (synthetic text), and tiny-gpt2/, a
word-level tokenizer built with the `tokenizers` library and a 2-layer GPT2Config, both saved with
save_pretrained so that AutoTokenizer/AutoConfig load them from the directory."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _text import WORDS, plain_lines
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPT2Config, PreTrainedTokenizerFast

Path("data").mkdir(exist_ok=True)
Path("data/train.txt").write_text(plain_lines(400, seed=3), encoding="utf-8")
Path("data/valid.txt").write_text(plain_lines(60, seed=4), encoding="utf-8")
vocab = {"<unk>": 0, "<|endoftext|>": 1}
for w in sorted(set(WORDS)):
    vocab.setdefault(w, len(vocab))
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.Whitespace()
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<|endoftext|>",
                               bos_token="<|endoftext|>")
fast.save_pretrained("tiny-gpt2")
GPT2Config(vocab_size=len(vocab), n_positions=64, n_embd=64, n_layer=2, n_head=2,
           bos_token_id=1, eos_token_id=1).save_pretrained("tiny-gpt2")

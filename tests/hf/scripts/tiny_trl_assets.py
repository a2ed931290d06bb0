"""Offline assets for TRL's own scripts: a tiny random Llama saved from a config (tokenizer trained in-process)
and tiny local datasets: ``text`` for sft.py, conversational ``prompt`` for grpo.py.

Run: python tiny_trl_assets.py WORKDIR  -> WORKDIR/tiny-llama, WORKDIR/sft/train.jsonl, WORKDIR/grpo/train.jsonl
"""
import json
import os
import sys

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

work = sys.argv[1]
model_dir = os.path.join(work, "tiny-llama")
for name in ("sft", "grpo"):
    os.makedirs(os.path.join(work, name), exist_ok=True)

corpus = [f"what is {a} plus {b}? the answer is {a + b}." for a in range(12) for b in range(12)]
tok = Tokenizer(models.BPE(unk_token="<unk>"))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>", "<pad>"]))
tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>",
                                    unk_token="<unk>")
tokenizer.chat_template = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
                           "{% if add_generation_prompt %}<s>assistant:{% endif %}")
tokenizer.save_pretrained(model_dir)
torch.manual_seed(0)
cfg = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                  bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                  pad_token_id=tokenizer.pad_token_id)
LlamaForCausalLM(cfg).save_pretrained(model_dir)
with open(os.path.join(work, "sft", "train.jsonl"), "w") as sft, \
        open(os.path.join(work, "grpo", "train.jsonl"), "w") as grpo:
    for line in corpus[:64]:
        sft.write(json.dumps({"text": line}) + "\n")
        grpo.write(json.dumps({"prompt": [{"role": "user", "content": line.split("?")[0] + "?"}]}) + "\n")
print(model_dir)

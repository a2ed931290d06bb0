"""A TRL GRPO + LoRA (DAPO) job written the way open-r1 writes it (src/open_r1/grpo.py + utils/model_utils.py),
for CUDA: bf16, attn_implementation="flash_attention_2", loss_type="dapo", use_vllm=False.

Offline: a tiny random Llama saved from a config, a BPE tokenizer trained in-process, a python reward.
Run: python grpo_lora.py WORKDIR OUT.json
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast, TrainerCallback
from trl import GRPOConfig, GRPOTrainer, ModelConfig, get_peft_config, get_quantization_config

work, out_path = sys.argv[1], sys.argv[2]
model_dir = os.path.join(work, "tiny-llama")

# -- a local "hub" model: tokenizer trained in-process, random weights from a config ----------------------------
corpus = [f"what is {a} plus {b}? the answer is {a + b}." for a in range(20) for b in range(20)]
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

# -- open-r1 style ------------------------------------------------------------------------------------------------
model_args = ModelConfig(model_name_or_path=model_dir, dtype="bfloat16",
                         attn_implementation="flash_attention_2", use_peft=True, lora_r=4, lora_alpha=8,
                         lora_target_modules=["q_proj", "v_proj"])
training_args = GRPOConfig(
    output_dir=os.path.join(work, "out"), bf16=True, loss_type="dapo", use_vllm=False,
    per_device_train_batch_size=4, num_generations=2, max_completion_length=8, max_steps=2,
    learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no", seed=0,
    gradient_checkpointing=True, disable_tqdm=True,
)


def get_model(model_args, training_args):
    torch_dtype = (model_args.torch_dtype if model_args.dtype in ["auto", None]
                   else getattr(torch, model_args.dtype))
    quantization_config = get_quantization_config(model_args)
    model_kwargs = dict(revision=getattr(model_args, "model_revision", None) or "main",
                        attn_implementation=model_args.attn_implementation, dtype=torch_dtype,
                        use_cache=False if training_args.gradient_checkpointing else True,  # noqa: SIM211  (open-r1's)
                        quantization_config=quantization_config)
    return AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path, **model_kwargs)


def length_reward(completions, **kwargs):
    return [-abs(len(c[0]["content"] if isinstance(c, list) else c) - 10) / 10.0 for c in completions]


dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": f"what is {i} plus {i + 1}?"}]
                                        for i in range(16)]})
model = get_model(model_args, training_args)
logs = []


class Record(TrainerCallback):
    def on_log(self, args, state, control, logs=None, **kw):
        if logs:
            Record.rows.append(dict(logs))


Record.rows = logs
trainer = GRPOTrainer(model=model, reward_funcs=[length_reward], args=training_args, train_dataset=dataset,
                      processing_class=tokenizer, peft_config=get_peft_config(model_args), callbacks=[Record()])
trainer.train()

tensors = {f"param:{n}": str(p.device) for n, p in trainer.model.named_parameters()}
tensors.update({f"buffer:{n}": str(b.device) for n, b in trainer.model.named_buffers()})
result = {
    "steps": trainer.state.global_step, "logs": logs,
    "devices": sorted(set(tensors.values())), "n_tensors": len(tensors),
    "lora_params": sum(1 for n in tensors if "lora_" in n),
    "attn_implementation": trainer.model.config._attn_implementation,
    "dtypes": sorted({str(p.dtype) for p in trainer.model.parameters()}),
}
try:  # test instrumentation only: which emulated fused NPU ops ran (absent on a real NPU)
    from ascend_shim.sim import counters
    result["op_calls"] = dict(counters.op_calls())
except ImportError:
    pass
with open(out_path, "w") as f:
    json.dump(result, f)
print("GRPO done", result["steps"], result["devices"])

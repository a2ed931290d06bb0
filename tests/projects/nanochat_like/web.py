"""A chat_web-shaped server script (written for ascend_shim's tests, CUDA-only as nanochat is).

Patterns of nanochat's scripts/chat_web.py (present up to da32e1d^, removed upstream since): `--num-gpus N`
and `--device-type` restricted to cuda|cpu|mps; a pool of workers, one model replica per device built with
`torch.device(f"cuda:{gpu_id}")` (no `set_device`: the current device stays 0), `torch.cuda.device_count()` when
no count is given, an asyncio queue handing a free worker to each request; generation as nanochat's Engine does it
(inference mode, per-device `torch.Generator`, FA3 kv cache prefill then one token at a time, `cache_seqlens`
advanced in place) streamed back token by token while other requests run on the other devices. No HTTP server
here: `asyncio.gather` plays the concurrent requests. Prints `RESULT {json}` at the end.
"""
import argparse
import asyncio
import json
import sys
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from nanochat import flash_attention
from nanochat.common import COMPUTE_DTYPE, autodetect_device_type, compute_init
from nanochat.flash_attention import flash_attn

parser = argparse.ArgumentParser()
parser.add_argument("-n", "--num-gpus", type=int, default=1, help="0: every visible device")
parser.add_argument("--device-type", type=str, default="", choices=["cuda", "cpu", "mps"])
parser.add_argument("--requests", type=int, default=4)
args = parser.parse_args()

device_type = autodetect_device_type() if args.device_type == "" else args.device_type
ddp, rank, local_rank, world, device = compute_init(device_type)

V, H, D, CAP, WINDOW, MAX_TOKENS = 64, 2, 16, 32, 64, 6  # window wider than the cache: the "L" pattern
PROMPT, FORCED = [1, 5, 9, 2, 7, 3], [4, 8, 15, 16, 23, 42]


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(V, H * D)
        self.qkv = nn.Linear(H * D, 3 * H * D, bias=False)
        self.proj = nn.Linear(H * D, H * D, bias=False)
        self.lm_head = nn.Linear(H * D, V, bias=False)

    def forward(self, idx, k_cache, v_cache, cache_seqlens):
        x = self.wte(idx).to(COMPUTE_DTYPE)
        q, k, v = F.linear(x, self.qkv.weight.to(x.dtype)).view(idx.size(0), idx.size(1), 3, H, D).unbind(2)
        y = flash_attn.flash_attn_with_kvcache(q, k_cache, v_cache, k=k, v=v, cache_seqlens=cache_seqlens,
                                               causal=True, window_size=(WINDOW, 0))
        x = x + F.linear(y.reshape(idx.size(0), idx.size(1), H * D), self.proj.weight.to(x.dtype))
        return F.linear(x, self.lm_head.weight.to(x.dtype)).float()


def load_model(device):
    torch.manual_seed(0)  # every replica holds the same weights, as a checkpoint loaded on each device
    return TinyLM().to(device).eval()


class Engine:
    def __init__(self, model):
        self.model = model

    @torch.inference_mode()
    def generate(self, tokens, max_tokens, temperature=0.0, seed=42, forced=None):
        """Yields (token, last logits as a list); `forced` replaces sampling (teacher forcing)."""
        device = next(self.model.parameters()).device
        rng = torch.Generator(device=device)
        rng.manual_seed(seed)
        k_cache = torch.zeros(1, CAP, H, D, device=device, dtype=COMPUTE_DTYPE)
        v_cache = torch.zeros_like(k_cache)
        cache_seqlens = torch.zeros(1, dtype=torch.int32, device=device)
        ids = torch.tensor([tokens], dtype=torch.long, device=device)
        logits = self.model(ids, k_cache, v_cache, cache_seqlens)[:, -1, :]  # the prefill
        cache_seqlens += len(tokens)
        for i in range(max_tokens):
            if forced is not None:
                next_ids = torch.tensor([[forced[i]]], device=device)
            elif temperature == 0.0:
                next_ids = torch.argmax(logits, dim=-1, keepdim=True)
            else:
                probs = F.softmax(logits / temperature, dim=-1)
                next_ids = torch.multinomial(probs, num_samples=1, generator=rng)
            token = next_ids[:, 0].tolist()[0]
            yield token, logits[0].tolist()
            logits = self.model(next_ids, k_cache, v_cache, cache_seqlens)[:, -1, :]
            cache_seqlens += 1


@dataclass
class Worker:
    gpu_id: int
    device: torch.device
    engine: Engine


class WorkerPool:
    def __init__(self, num_gpus=None):
        if num_gpus is None:
            num_gpus = torch.cuda.device_count() if device_type == "cuda" else 1
        self.num_gpus = num_gpus
        self.workers = []
        self.available_workers = asyncio.Queue()

    async def initialize(self):
        if self.num_gpus > 1:
            assert device_type == "cuda", "Only CUDA supports multiple workers/GPUs. cpu|mps does not."
        for gpu_id in range(self.num_gpus):
            if device_type == "cuda":  # noqa: SIM108  (as chat_web.py writes it)
                device = torch.device(f"cuda:{gpu_id}")
            else:
                device = torch.device(device_type)
            worker = Worker(gpu_id=gpu_id, device=device, engine=Engine(load_model(device)))
            self.workers.append(worker)
            await self.available_workers.put(worker)

    async def acquire_worker(self):
        return await self.available_workers.get()

    async def release_worker(self, worker):
        await self.available_workers.put(worker)


async def generate_stream(worker, tokens, temperature, max_new_tokens):
    for token, _logits in worker.engine.generate(tokens, max_new_tokens, temperature=temperature, seed=1234):
        yield f"data: {json.dumps({'token': token, 'gpu': worker.gpu_id})}\n\n"
    yield f"data: {json.dumps({'done': True})}\n\n"


async def chat_completion(pool, temperature):
    worker = await pool.acquire_worker()
    chunks = []
    try:
        async for chunk in generate_stream(worker, PROMPT, temperature, MAX_TOKENS):
            chunks.append(json.loads(chunk[len("data: "):]))
            await asyncio.sleep(0)  # the response is sent: other requests decode on their devices meanwhile
    finally:
        await pool.release_worker(worker)
    return {"gpu": worker.gpu_id, "temperature": temperature, "tokens": [c["token"] for c in chunks if "token" in c],
            "done": chunks[-1] == {"done": True}}


async def main():
    pool = WorkerPool(num_gpus=args.num_gpus or None)
    await pool.initialize()
    responses = await asyncio.gather(*[chat_completion(pool, 0.0 if i % 2 == 0 else 0.8)
                                       for i in range(args.requests)])
    forced = [[logits for _tok, logits in w.engine.generate(PROMPT, MAX_TOKENS, forced=FORCED)] for w in pool.workers]
    return {
        "rank": rank, "device_count": torch.cuda.device_count() if device_type == "cuda" else 0,
        "num_gpus": pool.num_gpus, "use_fa3": flash_attention.USE_FA3,
        "fa3": getattr(flash_attention._fa3, "__name__", None),
        "workers": [{"gpu_id": w.gpu_id, "device": str(w.device),
                     "params": sorted({str(p.device) for p in w.engine.model.parameters()})} for w in pool.workers],
        "responses": responses, "forced_logits": forced,
    }


result = asyncio.run(main())
sys.stdout.write("RESULT " + json.dumps(result) + "\n")
sys.stdout.flush()

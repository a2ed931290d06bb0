"""Whole steps under the shim against the same steps hand-ported to ``"npu"``, side by side in one run.

What users feel is the step, not the call. Three cases on the emulated NPU (sim backend):

(a) a GPT-style training step written for CUDA: ``model.cuda()``, batches moved with ``.to("cuda")``,
    ``torch.autocast("cuda")``, ``torch.amp.GradScaler("cuda")``, ``AdamW(fused=True)``; run with the shim active,
    against the same step written for ``"npu"`` with the shim inactive (only the emulator up);
(b) a Hugging Face ``Trainer`` training step (``trainer.training_step`` + optimizer step, where accelerate and
    transformers ask ``is_available``/``is_cuda`` from library frames), built and run with the shim active,
    against a second Trainer built and run with the shim inactive;
(c) decode through the shim's flash_attn provider, device-to-host syncs and time per token: (c1) nanochat's
    Engine loop reduced to its device traffic (inference mode, FA3 ``flash_attn_with_kvcache`` in each of
    ``--layers`` layers, lengths advanced in place, the sampler's ``.tolist()``: 1 sync per token is the floor);
    (c2) transformers ``generate`` on a padded batch with ``flash_attention_2`` against ``sdpa`` (a decode step of
    flash_attention_2 reads nothing to the host: both make transformers' own reads only).

(a) and (b) run each side in a process of its own for the whole run (the shim active from the start, as
``ascend_shim run`` has it, or never) and interleave rounds between them (shim, hand port, hand port, shim,
...), printing the ratio of medians. Switching the shim on and off inside one process would charge the side that
runs next for the collector's debt the switch leaves (8-14% of a Trainer step in an A/A test). A second
hand-port process gives the noise floor: hand port against hand port, measured the same way in the same run.
All sides start from the same weights and batches; their losses are compared step for step.

    python bench/bench_step.py [--rounds 7] [--steps 5] [--skip-hf] [--no-noise-floor] [--layers 12]
"""
from __future__ import annotations

import argparse
import multiprocessing
import statistics
import sys
import time
import traceback

import torch
import torch.nn as nn

import ascend_shim
import ascend_shim.sim
from ascend_shim.sim import counters


class TinyGPT(nn.Module):
    def __init__(self, vocab=256, d=128, layers=4, heads=4, seq=64):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        layer = nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight  # tied, as GPT-2 does

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        mask = nn.Transformer.generate_square_subsequent_mask(idx.shape[1], device=idx.device)
        x = self.blocks(self.wte(idx) + self.wpe(pos), mask=mask, is_causal=True)
        logits = self.head(self.ln(x))
        return nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def gpt_runner(shim: bool):
    """One training step as a CUDA script (device "cuda", under the shim) or its hand port (device "npu") writes
    it; returns the step and the list its losses go to."""
    device = "cuda" if shim else "npu"
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randint(0, 256, (8, 64), generator=g), torch.randint(0, 256, (8, 64), generator=g))
               for _ in range(4)]
    torch.manual_seed(0)
    model = TinyGPT()
    model = model.cuda() if device == "cuda" else model.npu()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    scaler = torch.amp.GradScaler(device)
    losses = []

    def step(i):
        x, y = batches[i % len(batches)]
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with torch.autocast(device, dtype=torch.bfloat16):
            loss = model(x, y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())

    return step, losses


def hf_runner(shim: bool):
    """A tiny Llama under a real ``Trainer``; returns one optimizer step as a callable and the list its losses
    go to.

    The CUDA script asks for ``adamw_torch_fused`` (transformers' default); its hand port for ``"npu"`` asks for
    ``adamw_torch_npu_fused``, what the shim maps the former to, so both sides run the same optimizer."""
    optim = "adamw_torch_fused" if shim else "adamw_torch_npu_fused"
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg)
    args = TrainingArguments(output_dir="/tmp/ascend_shim_bench_step", per_device_train_batch_size=4,
                             report_to=[], bf16=True, max_steps=1, save_strategy="no", logging_strategy="no",
                             optim=optim)
    trainer = Trainer(model=model, args=args)
    trainer.create_optimizer_and_scheduler(num_training_steps=10_000)
    trainer.current_gradient_accumulation_steps = 1  # what train() sets before its first step
    ids = torch.randint(0, 256, (4, 32))
    batch = {"input_ids": ids, "labels": ids}
    losses = []

    def step(_i):
        losses.append(trainer.training_step(trainer.model, dict(batch)))
        trainer.optimizer.step()
        trainer.optimizer.zero_grad()  # NpuFusedAdamW (both sides) keeps its flat grad buffers

    return step, losses


RUNNERS = {"gpt": gpt_runner, "hf": hf_runner}


def timed(step, n, start):
    """(wall, process cpu) seconds per step, after one untimed step (the other side's round left the caches
    cold)."""
    step(start)
    torch.npu.synchronize()
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(start, start + n):
        step(i)
    torch.npu.synchronize()
    return (time.perf_counter() - t0) / n, (time.process_time() - c0) / n


def python_calls(step, n, start):
    """Python-level calls (functions and builtins) per step: the shim's added work, free of timing noise."""
    count = [0]

    def prof(_frame, event, _arg):
        if event in ("call", "c_call"):
            count[0] += 1

    sys.setprofile(prof)
    try:
        for i in range(start, start + n):
            step(i)
    finally:
        sys.setprofile(None)
    return count[0] / n


def under(active, fn, *args):
    """Run ``fn`` with the shim active or inactive (the decode cases, which need no hand port)."""
    if not active:
        return fn(*args)
    ascend_shim.activate(backend="sim", inherit=False, log_level="off")
    try:
        return fn(*args)
    finally:
        ascend_shim.deactivate()


def _serve(conn, kind, shim):
    """A side's process: bring the shim up (or only the emulator), build the step, then answer the parent's
    requests until it sends ``None``."""
    if shim:
        ascend_shim.activate(backend="sim", inherit=False, log_level="off")
    else:
        ascend_shim.sim.install()
    step, losses = RUNNERS[kind](shim)
    requests = {"time": lambda n, start: timed(step, n, start),
                "calls": lambda n, start: python_calls(step, n, start),
                "losses": lambda: [float(x) for x in torch.stack(losses).float().cpu()]}
    while (msg := conn.recv()) is not None:
        try:
            conn.send(requests[msg[0]](*msg[1:]))
        except Exception:  # noqa: BLE001 - the parent re-raises it with the side's name
            conn.send(RuntimeError(traceback.format_exc()))


class Side:
    """One side of a comparison, in a process of its own for its whole life."""

    def __init__(self, name, kind, shim):
        ctx = multiprocessing.get_context("spawn")
        self.name, (self.conn, child) = name, ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, kind, shim), daemon=True)
        self.proc.start()
        child.close()

    def ask(self, *msg):
        self.conn.send(msg)
        answer = self.conn.recv()
        if isinstance(answer, Exception):
            raise RuntimeError(f"{self.name} side failed:\n{answer}")
        return answer

    def close(self):
        self.conn.send(None)
        self.proc.join()


def compare(name, kind, rounds, steps, noise_floor):
    sides = [Side("shim", kind, True), Side("hand-port", kind, False)]
    if noise_floor:
        sides.append(Side("hand-port 2", kind, False))
    try:
        for side in sides:
            side.ask("time", 1, 0)  # warm-up (allocator, autocast caches)
        times = {side.name: [] for side in sides}
        for r in range(rounds):
            for side in (sides if r % 2 == 0 else sides[::-1]):
                times[side.name].append(side.ask("time", steps, 1 + r * steps)[0])
        calls = {side.name: side.ask("calls", 3, 1 + rounds * steps) for side in sides}
        losses = {side.name: side.ask("losses") for side in sides}
    finally:
        for side in sides:
            side.close()

    def ratio(a, b):
        medians = statistics.median(times[a]) / statistics.median(times[b])
        paired = statistics.median(x / y for x, y in zip(times[a], times[b], strict=True))  # same round, back to back
        fastest = min(times[a]) / min(times[b])
        return f"ratio {medians:.3f}  (median of paired rounds {paired:.3f}, fastest rounds {fastest:.3f})"

    hand, shim = statistics.median(times["hand-port"]), statistics.median(times["shim"])
    print(f"  {name:34s} hand-port {hand * 1e3:8.2f} ms  shim {shim * 1e3:8.2f} ms  {ratio('shim', 'hand-port')}")
    if noise_floor:
        print(f"      noise floor, hand-port / hand-port 2: {ratio('hand-port', 'hand-port 2')}")
    print(f"      python calls per step: hand-port {calls['hand-port']:.0f}  shim {calls['shim']:.0f} "
          f"({calls['shim'] - calls['hand-port']:+.0f})")
    same = all(losses[side.name] == losses["hand-port"] for side in sides)
    print(f"      losses identical step for step: {same} ({len(losses['shim'])} steps each)")


def decode_engine(layers, tokens, heads=2, dim=64, prompt=16, batch=2, window=8):
    """nanochat's Engine, reduced to its device traffic: everything under ``torch.inference_mode`` (the KV cache
    and ``cache_seqlens`` are inference tensors), FA3 ``flash_attn_with_kvcache`` in every layer with a sliding
    window, ``cache_seqlens += T`` after the last layer, the sampler's ``.tolist()`` once per token."""
    from flash_attn_interface import flash_attn_with_kvcache

    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator().manual_seed(0)
    proj = [torch.randn(heads * dim, 3 * heads * dim, generator=g).to(dt) * dim ** -0.5 for _ in range(layers)]
    head = torch.randn(heads * dim, 256, generator=g).to(dt)
    emb = torch.randn(256, heads * dim, generator=g).to(dt)
    with torch.inference_mode():
        proj, head, emb = [w.to(dev) for w in proj], head.to(dev), emb.to(dev)
        k_cache = torch.zeros(layers, batch, prompt + tokens + 2, heads, dim, device=dev, dtype=dt)
        v_cache = torch.zeros_like(k_cache)
        seqlens = torch.zeros(batch, dtype=torch.int32, device=dev)

        def forward(ids):
            x = emb[ids]  # (B, T, C)
            B, T, _ = x.shape
            for i, w in enumerate(proj):
                q, k, v = (x @ w).view(B, T, 3, heads, dim).unbind(2)
                y = flash_attn_with_kvcache(q, k_cache[i], v_cache[i], k=k, v=v, cache_seqlens=seqlens,
                                            causal=True, window_size=(window if i % 2 == 0 else -1, 0))
                x = x + y.reshape(B, T, -1)
            seqlens.add_(T)
            return x[:, -1] @ head

        ids = torch.randint(0, 256, (batch, prompt), generator=g).to(dev)
        logits = forward(ids)
        s0, t0 = counters.d2h_syncs(), time.perf_counter()
        for _ in range(tokens):
            nxt = logits.argmax(-1, keepdim=True)
            nxt.tolist()  # the sampler's one read per token
            logits = forward(nxt)
        dt_tok, syncs = (time.perf_counter() - t0) / tokens, (counters.d2h_syncs() - s0) / tokens
    print(f"  (c1) nanochat-style engine, {layers} layers, inference_mode: {syncs:.2f} syncs per token "
          f"(the sampler's read is 1), {dt_tok * 1e3:.2f} ms per token")


def decode_generate(layers, tokens):
    """transformers ``generate`` on a tiny Llama, a left-padded batch of 2, greedy: flash_attention_2 (the NPU
    integration's varlen function, routed to the provider) against sdpa, syncs and time per generated token."""
    from transformers import LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList

    marks = []

    class Mark(LogitsProcessor):
        def __call__(self, input_ids, scores):
            marks.append((counters.d2h_syncs(), time.perf_counter()))
            return scores

    cfg = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=layers,
               num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256)
    ids = torch.randint(0, 256, (2, 10), generator=torch.Generator().manual_seed(2))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    out = {}
    for attn in ("flash_attention_2", "sdpa"):
        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**cfg, attn_implementation=attn)).to("cuda", torch.float16).eval()
        marks.clear()
        toks = model.generate(ids.to("cuda"), attention_mask=mask.to("cuda"), max_new_tokens=tokens,
                              min_new_tokens=tokens, do_sample=False, pad_token_id=0,
                              logits_processor=LogitsProcessorList([Mark()]))
        (s0, t0), (s1, t1) = marks[1], marks[-1]
        n = len(marks) - 2
        out[attn] = toks.tolist()
        print(f"  (c2) transformers generate, {layers} layers, padded batch 2, {attn:17s}: "
              f"{(s1 - s0) / n:.2f} syncs per token, {(t1 - t0) / n * 1e3:.2f} ms per token")
    same = out["flash_attention_2"] == out["sdpa"]
    print(f"       same tokens flash_attention_2 / sdpa: {same} (the syncs of both are transformers' own)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=5, help="steps per timed round")
    ap.add_argument("--layers", type=int, default=12, help="decode depth")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--no-noise-floor", dest="noise_floor", action="store_false",
                    help="skip the second hand-port process (hand port against hand port)")
    args = ap.parse_args()

    print("training steps, shim vs. hand port, one process per side (median of interleaved rounds):")
    compare("(a) GPT step (autocast, scaler)", "gpt", args.rounds, args.steps, args.noise_floor)
    if not args.skip_hf:
        compare("(b) HF Trainer step", "hf", args.rounds, args.steps, args.noise_floor)

    ascend_shim.sim.install()
    print("(c) decode through the flash_attn provider (shim active):")
    under(True, decode_engine, args.layers, args.tokens)
    if not args.skip_hf:
        under(True, decode_generate, args.layers, args.tokens)


if __name__ == "__main__":
    main()

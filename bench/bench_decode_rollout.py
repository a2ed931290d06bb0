"""Small-op-heavy steps under the shim against their hand ports, side by side in one run: where a per-call cost
of the shim would show, a decode step and an RL rollout step.

Two loops written as CUDA code writes them (device picked by ``torch.cuda.is_available()``, ``.to(device)``,
``torch.tensor([...], device=device)``, ``torch.Generator(device=device)``, ``torch.cuda.synchronize()``):

(a) decode: a tiny GPT with a KV cache, one token per step (nanoGPT's sampling: temperature, top-k,
    ``torch.multinomial`` on a device generator; nanochat's engine: the token read with ``.item()``, the stop
    check, the next input made with ``torch.tensor([[tok]], device=device)``);
(b) rollout: CleanRL's PPO rollout step on a vector of CartPole environments stepped on the host in numpy
    (``obs[step] = next_obs``, ``Categorical`` sampling, ``action.cpu().numpy()``,
    ``torch.tensor(reward).to(device)``, ``torch.Tensor(next_obs).to(device)``).

Sides, each a fresh process per round, rounds interleaved (one order, then the reverse):

* shim: ``python -m ascend_shim run --simulate`` of this file, the loops on ``"cuda"``;
* hand port: the same loops on ``"npu"`` (``import torch_npu``) over the same emulated NPU and torch_npu Python,
  with every patch set of the shim disabled (``--disable '*'``); a second hand-port process gives the noise
  floor (hand port / hand port again, an A/A comparison measured the same way);
* plain CPU torch, without the shim (``device="cpu"``), for context: what the emulated device costs.

Every side runs torch on one thread: the ops are tiny, and on a shared machine a second OpenMP thread waiting
for a busy core made a step 10-25x slower, swamping everything else.

Printed per loop: the step in process CPU time (the fastest of a process's repeats) and in wall time (their
median), medians over rounds, ratios shim / hand port and hand port / hand port again; the shim's boundary calls
per step (calls entering the shim's Python from outside it); and those calls alone, made as the loop makes them,
timed on both sides: the shim's own cost per step, measured without the rest of the step's noise. The generated
tokens and rollout sums are compared across the emulated sides.

    python bench/bench_decode_rollout.py [--rounds 7] [--tokens 64] [--rollout-steps 64] [--repeats 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHIM_DIRS = tuple(os.path.join(REPO, d) + os.sep for d in ("ascend_shim", "patches"))
EMULATOR_DIRS = (os.path.join(REPO, "ascend_shim", "sim") + os.sep,)  # the device core and both torch_npu layers


# -- the two loops, as CUDA code writes them ----------------------------------------------------------------------
def decode_loop(device: str, max_new_tokens: int):
    """A tiny GPT's generation, one token per step; returns ``generate()`` (the tokens it made)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    vocab, d, heads, layers, max_seq = 256, 64, 4, 2, 16 + max_new_tokens + 1

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.register_buffer("k_cache", torch.zeros(1, heads, max_seq, d // heads), persistent=False)
            self.register_buffer("v_cache", torch.zeros(1, heads, max_seq, d // heads), persistent=False)

        def forward(self, x, pos, mask):
            B, T, C = x.shape
            q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in self.qkv(self.ln1(x)).split(C, 2))
            self.k_cache.index_copy_(2, pos, k)
            self.v_cache.index_copy_(2, pos, v)
            y = F.scaled_dot_product_attention(q, self.k_cache, self.v_cache, attn_mask=mask)
            x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(max_seq, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)
            self.register_buffer("causal", torch.tril(torch.ones(max_seq, max_seq, dtype=torch.bool)),
                                 persistent=False)

        def forward(self, idx, pos):
            x = self.wte(idx) + self.wpe(pos)
            mask = self.causal[pos][None, None]
            for block in self.blocks:
                x = block(x, pos, mask)
            return self.head(self.ln_f(x))[:, -1]

    torch.manual_seed(0)
    model = GPT().to(device).eval()
    prompt = list(range(1, 17))
    eos = vocab  # never sampled: every generation runs its max_new_tokens steps, the check still made

    def sample(logits, gen, temperature=0.8, top_k=50):
        logits = logits / temperature
        v, _ = torch.topk(logits, top_k)
        logits[logits < v[:, [-1]]] = -float("inf")
        return torch.multinomial(F.softmax(logits, dim=-1), num_samples=1, generator=gen)

    @torch.inference_mode()
    def generate():
        gen = torch.Generator(device=device)
        gen.manual_seed(42)
        ids = torch.tensor([prompt], dtype=torch.long, device=device)
        logits = model(ids, torch.arange(len(prompt), device=device))
        tokens, t = [], len(prompt)
        for _ in range(max_new_tokens):
            tok = sample(logits, gen).item()
            if tok == eos:
                break
            tokens.append(tok)
            ids = torch.tensor([[tok]], dtype=torch.long, device=device)
            logits = model(ids, torch.tensor([t], device=device))
            t += 1
        return tokens

    return generate


def rollout_loop(device: str, num_steps: int, num_envs: int = 8):
    """CleanRL's PPO rollout (ppo.py) on numpy CartPoles; returns ``rollout()`` (a checksum of what it stored)."""
    import numpy as np
    import torch
    import torch.nn as nn
    from torch.distributions.categorical import Categorical

    class CartPoles:
        """gymnasium's CartPole-v1 dynamics for ``n`` environments at once, reset when done."""

        def __init__(self, n, seed):
            self.rng, self.n = np.random.default_rng(seed), n
            self.state, self.steps = self.rng.uniform(-0.05, 0.05, (n, 4)), np.zeros(n, dtype=np.int64)

        def step(self, action):
            x, x_dot, th, th_dot = self.state.T
            force = np.where(action == 1, 10.0, -10.0)
            cos, sin = np.cos(th), np.sin(th)
            temp = (force + 0.05 * th_dot ** 2 * sin) / 1.1
            th_acc = (9.8 * sin - cos * temp) / (0.5 * (4.0 / 3.0 - 0.1 * cos ** 2 / 1.1))
            x_acc = temp - 0.05 * th_acc * cos / 1.1
            self.state = np.stack([x + 0.02 * x_dot, x_dot + 0.02 * x_acc, th + 0.02 * th_dot,
                                   th_dot + 0.02 * th_acc], axis=1)
            self.steps += 1
            terminated = (np.abs(self.state[:, 0]) > 2.4) | (np.abs(self.state[:, 2]) > 0.2095)
            truncated = self.steps >= 500
            done = terminated | truncated
            self.state[done] = self.rng.uniform(-0.05, 0.05, (int(done.sum()), 4))
            self.steps[done] = 0
            return self.state.astype(np.float32), np.ones(self.n, dtype=np.float32), terminated, truncated, {}

    def layer_init(layer, std=2 ** 0.5, bias_const=0.0):
        torch.nn.init.orthogonal_(layer.weight, std)
        torch.nn.init.constant_(layer.bias, bias_const)
        return layer

    class Agent(nn.Module):
        def __init__(self):
            super().__init__()
            self.critic = nn.Sequential(layer_init(nn.Linear(4, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)),
                                        nn.Tanh(), layer_init(nn.Linear(64, 1), std=1.0))
            self.actor = nn.Sequential(layer_init(nn.Linear(4, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)),
                                       nn.Tanh(), layer_init(nn.Linear(64, 2), std=0.01))

        def get_action_and_value(self, x, action=None):
            probs = Categorical(logits=self.actor(x))
            if action is None:
                action = probs.sample()
            return action, probs.log_prob(action), probs.entropy(), self.critic(x)

    torch.manual_seed(1)
    torch.backends.cudnn.deterministic = True
    agent = Agent().to(device)
    envs = CartPoles(num_envs, seed=1)
    obs = torch.zeros((num_steps, num_envs, 4)).to(device)
    actions = torch.zeros((num_steps, num_envs)).to(device)
    logprobs = torch.zeros((num_steps, num_envs)).to(device)
    rewards = torch.zeros((num_steps, num_envs)).to(device)
    dones = torch.zeros((num_steps, num_envs)).to(device)
    values = torch.zeros((num_steps, num_envs)).to(device)
    next_obs = torch.Tensor(envs.state.astype(np.float32)).to(device)
    next_done = torch.zeros(num_envs).to(device)

    def rollout():
        nonlocal next_obs, next_done
        for step in range(num_steps):
            obs[step] = next_obs
            dones[step] = next_done
            with torch.no_grad():
                action, logprob, _, value = agent.get_action_and_value(next_obs)
                values[step] = value.flatten()
            actions[step] = action
            logprobs[step] = logprob
            next_obs, reward, terminations, truncations, infos = envs.step(action.cpu().numpy())
            next_done = np.logical_or(terminations, truncations)
            rewards[step] = torch.tensor(reward).to(device).view(-1)
            next_obs, next_done = torch.Tensor(next_obs).to(device), torch.Tensor(next_done).to(device)
        return round(float(actions.sum() + logprobs.sum() + values.sum()), 3)

    return rollout


# -- one side: a process that times both loops ------------------------------------------------------------------
def boundary_calls(fn) -> int:
    """Calls entering the shim's own Python (its wrappers and patches) from outside it during ``fn()``; the
    emulated device's Python is not the shim's."""
    count = [0]

    def shim(code):
        f = code.co_filename
        return f.startswith(SHIM_DIRS) and not f.startswith(EMULATOR_DIRS)

    def prof(frame, event, _arg):
        if event == "call" and shim(frame.f_code) and (frame.f_back is None or not shim(frame.f_back.f_code)):
            count[0] += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0]


def boundary_only(device: str):
    """Per loop, one step's calls into the shim alone, made as the loop makes them: the part of the step where
    the shim adds work (the rest is the same with or without it)."""
    import numpy as np
    import torch

    reward, obs, done = np.ones(8, dtype=np.float32), np.zeros((8, 4), dtype=np.float32), np.zeros(8, dtype=bool)

    def decode_step_calls(tok=7, t=20):
        torch.tensor([[tok]], dtype=torch.long, device=device)
        torch.tensor([t], device=device)

    def rollout_step_calls():
        torch.tensor(reward).to(device).view(-1)
        torch.Tensor(obs).to(device), torch.Tensor(done).to(device)

    return {"decode": decode_step_calls, "rollout": rollout_step_calls}


def worker(args) -> None:
    import torch

    torch.set_num_threads(1)
    if args.api == "npu":
        import torch_npu  # noqa: F401  (the hand port's first line)

        device, sync = "npu", torch.npu.synchronize
    elif args.api == "cuda":
        device, sync = "cuda", torch.cuda.synchronize
        torch.cuda.manual_seed(0)
    else:
        device, sync = "cpu", (lambda: None)
    generate = decode_loop(device, args.tokens)
    rollout = rollout_loop(device, args.rollout_steps)
    tokens, checksum = generate(), rollout()  # warm-up (and the values the sides must agree on)
    rollout = rollout_loop(device, args.rollout_steps)  # the same rollouts again from the start, as timed below
    rollout()
    wall, cpu = {"decode": [], "rollout": []}, {"decode": [], "rollout": []}
    for _ in range(args.repeats):
        for name, fn, n in (("decode", generate, args.tokens), ("rollout", rollout, args.rollout_steps)):
            sync()
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            sync()
            wall[name].append((time.perf_counter() - t0) / n)
            cpu[name].append((time.process_time() - c0) / n)
    calls = {"decode": boundary_calls(generate) / args.tokens,
             "rollout": boundary_calls(rollout) / args.rollout_steps}
    only = {}
    for name, fn in boundary_only(device).items():
        fn()  # a first call at a site records it
        if boundary_calls(fn) != round(calls[name]):
            raise AssertionError(f"{name}: boundary_only makes {boundary_calls(fn)} shim calls, the loop {calls[name]}")
        best = []
        for _ in range(args.repeats):
            c0 = time.process_time()
            for _ in range(1000):
                fn()
            best.append((time.process_time() - c0) / 1000)
        only[name] = min(best)
    print(json.dumps({"tokens": tokens, "checksum": checksum, "calls": calls, "boundary_only": only,
                      "wall": {k: statistics.median(v) for k, v in wall.items()},
                      "cpu": {k: min(v) for k, v in cpu.items()}}))


# -- the parent: interleaved sides, one fresh process per side and round ----------------------------------------
SIDES = {  # name: (what the loops name, options of ``ascend_shim run``; None: plain python, no shim)
    "shim": ("cuda", []),
    "hand port": ("npu", ["--disable", "*"]),
    "hand port again": ("npu", ["--disable", "*"]),
    "cpu": ("cpu", None),
}


def run_side(name, args):
    api, options = SIDES[name]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    me = [os.path.abspath(__file__), "--worker", api, "--tokens", str(args.tokens),
          "--rollout-steps", str(args.rollout_steps), "--repeats", str(args.repeats)]
    if options is None:
        env.pop("ASCEND_SHIM_ENABLED", None)
        cmd = [sys.executable, *me]
    else:
        cmd = [sys.executable, "-m", "ascend_shim", "run", "--simulate", "--log-level", "off", *options, *me]
    out = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"side {name!r} failed:\n{out.stderr[-3000:]}")
    return json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=64, help="decode steps per generation")
    ap.add_argument("--rollout-steps", type=int, default=64, help="PPO rollout steps per rollout")
    ap.add_argument("--repeats", type=int, default=5, help="timed generations / rollouts per process")
    ap.add_argument("--no-cpu", action="store_true", help="leave out the plain-CPU side")
    ap.add_argument("--worker", choices=("cuda", "npu", "cpu"), dest="api", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.api:
        return worker(args)

    names = [n for n in SIDES if not (args.no_cpu and n == "cpu")]
    results = {n: [] for n in names}
    for r in range(args.rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            results[name].append(run_side(name, args))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    def times(name, loop, measure):
        return [res[measure][loop] for res in results[name]]

    def ratio(a, b, loop, measure):
        """(ratio of the medians over rounds, median of the rounds' own ratios)"""
        ta, tb = times(a, loop, measure), times(b, loop, measure)
        paired = statistics.median(x / y for x, y in zip(ta, tb, strict=True))
        return statistics.median(ta) / statistics.median(tb), paired

    print(f"shim / hand port, {args.rounds} rounds (a fresh process per side and round); per step: the fastest of "
          "a process's repeats in process CPU time, the median in wall time; medians over rounds")
    for loop, unit in (("decode", "token"), ("rollout", "step")):
        print(f"  {loop} (ms per {unit}):")
        for measure in ("cpu", "wall"):
            shim, port = (statistics.median(times(n, loop, measure)) * 1e3 for n in ("shim", "hand port"))
            r, paired = ratio("shim", "hand port", loop, measure)
            aa, aa_paired = ratio("hand port", "hand port again", loop, measure)
            cpu = (f"   plain CPU torch {statistics.median(times('cpu', loop, measure)) * 1e3:.3f}"
                   if "cpu" in results else "")
            print(f"    {measure:4s} hand port {port:.3f}  shim {shim:.3f}  shim/hand port {r:.3f} "
                  f"(paired {paired:.3f})   noise floor {aa:.3f} (paired {aa_paired:.3f}){cpu}")
        b_shim, b_port = (statistics.median(times(n, loop, "boundary_only")) * 1e6 for n in ("shim", "hand port"))
        step = statistics.median(times("hand port", loop, "cpu")) * 1e6
        print(f"    shim boundary calls per {unit}: {results['shim'][0]['calls'][loop]:.1f}; those calls alone, CPU us "
              f"per {unit}: hand port {b_port:.1f}  shim {b_shim:.1f}: the shim adds {b_shim - b_port:.1f} "
              f"= {(b_shim - b_port) / step:.2%} of the step")
    emulated = [n for n in names if n != "cpu"]
    for key in ("tokens", "checksum"):
        same = all(res[key] == results["shim"][0][key] for n in emulated for res in results[n])
        print(f"  {key} identical across the emulated sides and rounds: {same}")


if __name__ == "__main__":
    main()

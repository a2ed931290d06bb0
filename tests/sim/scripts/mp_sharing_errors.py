"""npu objects that cannot be shared, sent through torch.multiprocessing queues: the receiver raises, nobody hangs."""
import sys

import torch
import torch.multiprocessing as mp


def receive(queue, results):
    try:
        queue.get(timeout=120)
        results.put("received")
    except Exception as exc:  # what the item carried
        results.put(f"{type(exc).__name__}: {exc}")


def send(method, item):
    ctx = mp.get_context(method)
    queue, results = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=receive, args=(queue, results))
    p.start()
    queue.put(item)
    outcome = results.get(timeout=120)
    p.join(timeout=60)
    return outcome


if __name__ == "__main__":
    x = torch.ones(4, device="cuda", requires_grad=True)
    cases = {
        "non_leaf": ("spawn", x * 2),
        "bare_storage": ("spawn", torch.ones(4, device="cuda").untyped_storage()),
        "forked_after_use": ("fork", torch.ones(4, device="cuda")),
        "leaf": ("spawn", x.detach()),
    }
    for name, (method, item) in cases.items():
        print(f"CASE {name}: {send(method, item)}", flush=True)
    sys.exit(0)

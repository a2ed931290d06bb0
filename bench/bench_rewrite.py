"""Cost of the comparison rewrite against plain ``compile()``, side by side in one run, by module size.

A generated module of N functions, each with one rewritten comparison (``x.device.type == "cuda"``), is
compiled plainly and through the rewrite (parse, rewrite, compile: what an import of a CUDA-code module costs
when the rewrite cache misses); the best of ``--runs`` in CPU time (one thread: other load on the machine
matters less). Shown as ratios only: rewrite / compile at each size, and each size's time over the previous
one's (linear growth: about the size ratio, 4 here; quadratic: 16).

    python bench/bench_rewrite.py [--runs 3] [--sizes 1000,4000,16000]
"""
import argparse
import time

from ascend_shim.rewrite import rewrite_source


def module(n: int) -> str:
    return "\n".join(f'def f{i}(x):\n    return x.device.type == "cuda"\n' for i in range(n))


def best(fn, runs: int) -> float:
    out = float("inf")
    for _ in range(runs):
        start = time.process_time()
        fn()
        out = min(out, time.process_time() - start)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--sizes", default="1000,4000,16000")
    args = ap.parse_args()
    previous = None
    for n in (int(s) for s in args.sizes.split(",")):
        source = module(n)
        plain = best(lambda s=source: compile(s, "<bench>", "exec", dont_inherit=True), args.runs)
        rewritten = best(lambda s=source: rewrite_source(s, "<bench>"), args.runs)
        growth = f"   x{rewritten / previous[1]:.1f} for x{n / previous[0]:.0f} the sites" if previous else ""
        print(f"  {n:6d} sites   rewrite / compile {rewritten / plain:5.1f}{growth}")
        previous = (n, rewritten)


if __name__ == "__main__":
    main()

"""The experts of a Mixtral-style MoE layer on the cpu target (issue 31): ``ai.moe_experts``
with a model's (constant) weights against transformers' eager ``MixtralExperts`` (its loop
over experts) on PyTorch's CPU, at decode and prefill token counts.

    python benchmarks/cpu_moe.py --out benchmarks/results      # cpu.py run moe

Per case (tokens, top-k of E experts, D, F; routing drawn as a router's top-k would be):
fusec (``@fusec.fuse`` over the constant weights, as an imported model holds them) and the
PyTorch loop, alternated, the shared timer's best of ``--rounds`` rounds each, the same
thread count for both (Numba's, OpenBLAS's and torch's: the machine's); checked against
each other (rel L2). Needs torch and transformers.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import best_ms, commit, write_results  # noqa: E402

#: (tokens, k, experts, d_model, d_ff): decode and prefill at Mixtral's shape, scaled down
CASES = [(8, 2, 8, 1024, 2816), (1024, 2, 8, 1024, 2816)]

MOE = """func.func @moe(%x: tensor<{t}x{d}xf32>, %w: tensor<{t}x{k}xf32>, %e: tensor<{t}x{k}xi64>, %gu: tensor<{n}x{f2}x{d}xf32>, %dn: tensor<{n}x{d}x{f}xf32>) -> tensor<{t}x{d}xf32> {{
  %y = ai.moe_experts %x, %w, %e, %gu, %dn : tensor<{t}x{d}xf32> * tensor<{t}x{k}xf32> * tensor<{t}x{k}xi64> * tensor<{n}x{f2}x{d}xf32> * tensor<{n}x{d}x{f}xf32>
  return %y : tensor<{t}x{d}xf32>
}}"""  # noqa: E501


def inputs(tokens: int, k: int, count: int, width: int, hidden: int, seed: int = 0):
    """x, routing weights, expert indices (a top-k of random logits), gate_up, down."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((tokens, width)).astype(np.float32)
    picks = np.argsort(-rng.standard_normal((tokens, count)), axis=1)[:, :k].astype(np.int64)
    weights = rng.random((tokens, k)).astype(np.float32)
    gate_up = (rng.standard_normal((count, 2 * hidden, width)) / np.sqrt(width)).astype(np.float32)
    down = (rng.standard_normal((count, width, hidden)) / np.sqrt(hidden)).astype(np.float32)
    return x, weights, picks, gate_up, down


def dense(x, weights, picks, gate_up, down):
    """The layer token by token in numpy (the smoke's baseline)."""
    import numpy as np

    hidden = gate_up.shape[1] // 2
    out = np.zeros(x.shape, dtype=np.float32)
    for t in range(x.shape[0]):
        for j in range(picks.shape[1]):
            e = int(picks[t, j]) % gate_up.shape[0]
            p = gate_up[e] @ x[t]
            g, u = p[:hidden], p[hidden:]
            out[t] += weights[t, j] * (down[e] @ (g / (1 + np.exp(-g)) * u))
    return out


def measure(case, rounds: int) -> dict:
    import numpy as np
    import torch
    from transformers import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralExperts

    import fusec
    import fusec.ops as fo

    tokens, k, count, width, hidden = case
    x, weights, picks, gate_up, down = inputs(*case)

    @fusec.fuse(target="cpu")
    def layer(x, weights, picks):
        return fo.moe_experts(x, weights, picks, gate_up, down)

    config = MixtralConfig(
        hidden_size=width, intermediate_size=hidden, num_local_experts=count,
        num_experts_per_tok=k,
    )  # fmt: skip
    config._experts_implementation = "eager"
    module = MixtralExperts(config).eval()
    with torch.no_grad():
        module.gate_up_proj.copy_(torch.from_numpy(gate_up))
        module.down_proj.copy_(torch.from_numpy(down))
    tx, tw, te = (torch.from_numpy(a) for a in (x, weights, picks))
    got = layer(x, weights, picks)
    with torch.no_grad():
        want = module(tx, te, tw).numpy()
        fusec_ms, torch_ms = [], []
        for _ in range(rounds):  # alternated
            fusec_ms.append(best_ms(lambda: layer(x, weights, picks), rounds=1))
            torch_ms.append(best_ms(lambda: module(tx, te, tw), rounds=1))
    flops = 2.0 * tokens * k * 3 * hidden * width
    return {
        "case": f"{tokens} tokens, top-{k} of {count}, D {width}, F {hidden}",
        "fusec_ms": min(fusec_ms),
        "torch_ms": min(torch_ms),
        "gflops": flops / min(fusec_ms) / 1e6,
        "rel_l2": float(np.linalg.norm(got - want) / np.linalg.norm(want)),
        "threads": torch.get_num_threads(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    import torch
    import transformers

    rows = [measure(case, args.rounds) for case in CASES]
    meta = {
        "date": datetime.date.today().isoformat(),
        "commit": commit(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "rows": rows,
    }
    lines = [
        f"# cpu MoE experts vs transformers' loop over experts ({meta['date']}, commit "
        f"{meta['commit']})",
        "",
        "`python benchmarks/cpu_moe.py` (`cpu.py run moe`): f32, best of alternated rounds, ms.",
        "",
        "| case | threads | fusec ms | PyTorch loop ms | loop / fusec | fusec GFLOP/s | rel L2 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['case']} | {r['threads']} | {r['fusec_ms']:.2f} | {r['torch_ms']:.2f} | "
            f"{r['torch_ms'] / r['fusec_ms']:.2f}x | {r['gflops']:.0f} | {r['rel_l2']:.1e} |"
        )
    write_results(f"{args.out}/cpu-moe", meta, "\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Per-call cost of the spec methods envs call on hot paths, against their plain-torch floor.

Each row times the spec method and the few torch calls it cannot avoid (the floor), best of
several repeats, single thread. Run: ``python benchmarks/bench_core_specs.py``.
Writes ``benchmarks/results/core_specs.md``.
"""

from __future__ import annotations

import pathlib
import timeit

import torch
from tensordict import TensorDict

from rl.core import Bounded, Categorical, Composite, OneHot, Unbounded


def best_us(fn, number=2000, repeat=7) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main() -> str:
    torch.set_num_threads(1)
    bounded = Bounded(-2.0, 2.0, shape=(16, 1))
    low, high = bounded.low, bounded.high
    x = bounded.rand()
    cat = Categorical(6, shape=(16,))
    a = cat.rand()
    onehot = OneHot(6, shape=(16, 6))
    comp = Composite(
        observation=Unbounded(shape=(16, 3)),
        action=Bounded(-2.0, 2.0, shape=(16, 1)),
        shape=(16,),
    )
    comp["next", "observation"] = Unbounded(shape=(16, 3))
    comp["next", "reward"] = Unbounded(shape=(16, 1))
    comp["next", "done"] = Categorical(2, shape=(16, 1), dtype=torch.bool)
    td = comp.rand()

    def floor_zero():
        inner = TensorDict._new_unsafe(
            {
                "observation": torch.zeros(200, 16, 3),
                "reward": torch.zeros(200, 16, 1),
                "done": torch.zeros(200, 16, 1, dtype=torch.bool),
            },
            batch_size=torch.Size((200, 16)),
        )
        return TensorDict._new_unsafe(
            {
                "observation": torch.zeros(200, 16, 3),
                "action": torch.zeros(200, 16, 1),
                "next": inner,
            },
            batch_size=torch.Size((200, 16)),
        )

    def floor_onehot():
        idx = torch.randint(0, 6, (16,))
        return torch.zeros(16, 6, dtype=torch.bool).scatter_(-1, idx.unsqueeze(-1), 1)

    rows = [
        (
            "Bounded.rand()",
            lambda: bounded.rand(),
            lambda: torch.rand(16, 1).mul_(high - low).add_(low),
        ),
        (
            "Bounded.is_in(x)",
            lambda: bounded.is_in(x),
            lambda: bool(((x >= low) & (x <= high)).all()),
        ),
        ("Bounded.project(x)", lambda: bounded.project(x), lambda: torch.clamp(x, low, high)),
        ("Categorical.rand()", lambda: cat.rand(), lambda: torch.randint(0, 6, (16,))),
        ("Categorical.is_in(a)", lambda: cat.is_in(a), lambda: bool(((a >= 0) & (a < 6)).all())),
        ("OneHot.rand()", lambda: onehot.rand(), floor_onehot),
        ("Composite.zero((200,)) 5 leaves", lambda: comp.zero((200,)), floor_zero),
        ("Composite.is_in(td) 5 leaves", lambda: comp.is_in(td), None),
    ]
    lines = [
        "| method | spec (us) | floor (us) | ratio |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name, fn, floor in rows:
        t = best_us(fn)
        if floor is None:
            lines.append(f"| {name} | {t:.2f} | - | - |")
            continue
        f = best_us(floor)
        lines.append(f"| {name} | {t:.2f} | {f:.2f} | {t / f:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    table = main()
    print(table)
    out = pathlib.Path(__file__).parent / "results" / "core_specs.md"
    out.write_text(
        "# rl-core spec hot paths (CPU, 1 thread, best of 7)\n\n"
        "Floor: the plain torch calls the method must make.\n\n" + table + "\n"
    )

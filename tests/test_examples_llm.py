"""The LLM examples on tiny budgets: sft.py lowers the held-out loss of its chat data, and
grpo_countdown.py's GRPO stage raises the success of the answers it samples on held-out
prompts (a two-number Countdown over 1 and 2, which a 40-step SFT solves 1 time in 8)."""

from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "llm"


def _load(name: str):
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    spec = importlib.util.spec_from_file_location(f"llm_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _scalar(run_dir: Path, name: str) -> list[tuple[int, float]]:
    (path,) = [p for p in run_dir.rglob("*.csv") if p.as_posix().endswith(f"scalars/{name}.csv")]
    with open(path) as f:
        return [(int(step), float(value)) for step, value in csv.reader(f)]


def test_sft_lowers_the_held_out_loss(tmp_path):
    sft = _load("sft")
    out = sft.main(
        sft.Config(steps=30, batch_size=8, held_out=16, log_dir=str(tmp_path), progress=False)
    )
    assert out["loss_after"] < 0.6 * out["loss_before"]
    losses = [v for _, v in _scalar(tmp_path, "loss_sft")]
    assert len(losses) == 30 and losses[-1] < losses[0]
    assert 0.0 <= out["exact_match"] <= 1.0
    assert list(tmp_path.rglob("curve.png"))


def test_sft_data_is_history_chats():
    sft = _load("sft")
    chats = sft.load_chats(sft.Config().data)
    batch = sft.as_batch(chats[:4])
    roles = batch["history", "full"].role
    assert all(r[0] == "user" and r[1] == "assistant" for r in roles)


def test_grpo_runs_sft_then_grpo_and_logs_its_curve(tmp_path):
    """The pipeline at a tiny budget: SFT, 24 GRPO batches, evaluations at 0, 192, 384.
    No learning bar here: at this budget the held-out success moved +0.02, -0.01 and +0.02
    on seeds 0-2 on an AMD EPYC (MKL's other kernels), +0.10 on the machine it was tuned on."""
    grpo = _load("grpo_countdown")
    cfg = grpo.Config(
        max_number=2,  # 9 problems, 2 held out
        n_embd=64,
        sft_steps=40,
        sft_batch_size=16,
        sft_lr=1e-2,
        sft_examples=200,
        prompts_per_batch=4,
        group_size=4,
        grpo_batches=24,
        # one pass at a peak 1e-3 from the first batch: the tiny budget has no room for
        # the defaults' warm-up (their two passes at 6e-4 gain 8 points here, not 10)
        grpo_lr=1e-3,
        grpo_warmup=0,
        num_epochs=1,
        minibatch_size=16,
        max_new_tokens=8,
        eval_prompts=2,
        eval_samples=32,
        eval_interval=12,
        final_evals=2,
        log_dir=str(tmp_path),
        progress=False,
    )
    out = grpo.main(cfg)
    assert 0.0 <= out["sft_success"] <= 1.0 and 0.0 <= out["final_success"] <= 1.0
    assert [step for step, _ in out["curve"]] == [0, 192, 384]
    assert len(_scalar(tmp_path, "reward_mean")) == 24
    assert {"ESS", "clip_fraction", "kl_approx"} <= {
        p.stem for p in tmp_path.rglob("*.csv")
    }  # the loss's diagnostics, logged by the trainer
    assert list(tmp_path.rglob("curve.png"))


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_grpo_at_the_default_budget_raises_the_held_out_success(tmp_path):
    """The script's defaults (100 SFT steps, 200 GRPO batches of 64 answers: 5 minutes
    here): GRPO lifts the held-out success by at least the README's target of 20 points
    (seed 0 gained 63 points on 2026-12-01 here; the README's seeds 0-2, 66, 48 and 58). The tiny-budget test above has no
    learning bar: GRPO at a few dozen batches of 16 answers does not move it reliably."""
    grpo = _load("grpo_countdown")
    # no wall-clock cap: on a loaded machine it would cut the budget short
    cfg = grpo.Config(seed=0, grpo_minutes=None, log_dir=str(tmp_path), progress=False)
    out = grpo.main(cfg)
    assert out["answers"] == 200 * 64
    assert out["final_success"] - out["sft_success"] >= 0.20, out["curve"]


def test_countdown_problems_and_reward():
    import random

    grpo = _load("grpo_countdown")
    cfg = grpo.Config(num_count=3, max_number=9)
    rows = grpo.make_problems(50, cfg, random.Random(0))
    parser = sys.modules["_countdown"].CountdownRewardParser  # grpo.make_env's scorer
    for row in rows:  # each generating expression is a right answer
        target, numbers = parser._parse_ground_truth(row["answer"])
        assert target > 0 and sorted(numbers) == sorted(map(int, row["query"].split()[:3]))
        assert parser.validate_expression(row["solution"], target, numbers)
    held_out = grpo.make_problems(20, cfg, random.Random(1), distinct=True)
    assert len({r["query"] for r in held_out}) == 20
    train = grpo.make_problems(100, cfg, random.Random(2), exclude=[r["query"] for r in held_out])
    assert not {r["query"] for r in train} & {r["query"] for r in held_out}

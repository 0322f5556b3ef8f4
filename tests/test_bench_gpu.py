"""``benchmarks/bench_gpu.py`` in its ``--device cpu`` mode (the CUDA parts ran on a lent
H200, benchmarks/results/gpu.md; these tests keep the parts a CPU can run working)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_gpu"] = module
    spec.loader.exec_module(module)
    return module


class TestCpuMode:
    def test_quick_eager_run(self, bench, tmp_path, capsys):
        out = tmp_path / "gpu.md"
        res = bench.main(["--device", "cpu", "--quick", "--no-compile", "--out", str(out)])
        sz = bench.sizes(quick=True)
        # the CPU parts only: no build, no gpu tests, one CPU row per measurement
        assert "build" not in res and "tests" not in res
        assert [r["device"] for r in res["per"]] == ["cpu"]
        assert res["per"][0]["steps_per_s"] > 0
        (ppo,) = res["ppo"]
        assert (ppo["device"], ppo["compile"], ppo["cudagraphs"]) == ("cpu", False, False)
        assert ppo["frames"] == sz.ppo_envs * sz.ppo_steps * sz.ppo_batches
        assert ppo["frames_per_s"] > 0
        assert [(r["compile"], r["cudagraphs"]) for r in res["sac"]] == [(False, False)]
        assert res["sac"][0]["updates_per_s"] > 0
        text = out.read_text()
        assert text == capsys.readouterr().out.rstrip("\n") + "\n"
        assert "| cpu trees |" in text and "| cpu | eager |" in text

    def test_prioritized_step_keeps_buffer_full(self, bench):
        sz = bench.sizes(quick=True)
        row = bench.bench_prioritized(torch.device("cpu"), sz)
        assert row["device"] == "cpu" and row["steps_per_s"] > 0

    @pytest.mark.slow
    def test_compiled_cpu_run(self, bench):
        res = bench.main(["--device", "cpu", "--quick", "--parts", "ppo,sac"])
        assert res["ppo"][0]["compile"] is True
        assert [(r["compile"], r["cudagraphs"]) for r in res["sac"]] == [
            (False, False),
            (True, False),
        ]


class TestArguments:
    @pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
    def test_cuda_without_a_device(self, bench):
        with pytest.raises(SystemExit, match="torch.cuda.is_available\\(\\) is False"):
            bench.main(["--device", "cuda", "--quick"])

    def test_unknown_part(self, bench):
        with pytest.raises(SystemExit, match="unknown part\\(s\\) \\['gae'\\]"):
            bench.main(["--device", "cpu", "--parts", "per,gae"])

    def test_build_needs_cuda(self, bench):
        with pytest.raises(SystemExit, match="--parts build needs --device cuda"):
            bench.main(["--device", "cpu", "--parts", "build"])


class TestCudaGraphContract:
    """The PPO part's CUDA-graph path, on CPU: ``CudaGraphModule`` replaced by a stand-in
    that holds its callers to its contract (a TensorDict in and out, no tensor among the
    other arguments, the shapes of the capture, a replay running on a copy). Its first
    run on an H200 stopped at the update step's minibatch indices passed as a tensor
    argument, which this catches."""

    @pytest.mark.parametrize("compile", [False, True])
    def test_ppo_policy_and_update_step_keep_the_contract(self, bench, monkeypatch, compile):
        import importlib

        sys.path.insert(0, str(BENCH.parents[1] / "tests"))
        from _compile_checks import StrictCudaGraphs, cuda_graphs_on_cpu

        importlib.import_module("ppo")  # loaded, so that its _common is patched
        cuda_graphs_on_cpu(monkeypatch)
        sz = bench.sizes(quick=True)
        # past the 10 warm-up calls of the policy's and the update's graphs: 16 steps and
        # 24 update steps in 4 batches
        sz.ppo_warmup, sz.ppo_batches, sz.ppo_epochs, sz.ppo_minibatches = 2, 2, 3, 2
        StrictCudaGraphs.made.clear()
        row = bench.bench_ppo(torch.device("cpu"), sz, compile=compile, cudagraphs=True)
        assert len(StrictCudaGraphs.made) == 2  # the policy's and the update step's
        assert all(graph.replays > 0 for graph in StrictCudaGraphs.made)
        assert row["cudagraphs"] is True
        assert row["frames"] == sz.ppo_envs * sz.ppo_steps * sz.ppo_batches
        assert row["frames_per_s"] > 0


class TestOfflineScript:
    """``benchmarks/bench_gpu_offline.sh``: its steps and the rehearsal's precondition
    (the rehearsal itself downloads torch: it is run by hand, its results in
    benchmarks/results/gpu.md)."""

    SCRIPT = BENCH.parent / "bench_gpu_offline.sh"

    @staticmethod
    def run(script: Path, *args: str, env: dict | None = None):
        import os
        import subprocess

        return subprocess.run(
            ["bash", str(script), *args],
            capture_output=True,
            text=True,
            env=None if env is None else {**os.environ, **env},
        )

    def test_an_unknown_step_prints_the_usage(self):
        res = self.run(self.SCRIPT, "nope")
        assert res.returncode == 2
        assert "usage:" in res.stderr
        assert all(step in res.stderr for step in ("wheels", "run", "rehearse"))

    def test_the_rehearsal_needs_the_carried_wheels(self, tmp_path):
        import shutil

        # a copy in a tree without .whl/ (the script works from its folder's parent)
        (tmp_path / "benchmarks").mkdir()
        script = tmp_path / "benchmarks" / self.SCRIPT.name
        shutil.copy(self.SCRIPT, script)
        venv = tmp_path / "rl_rehearse"
        res = self.run(script, "rehearse", env={"REHEARSE_VENV": str(venv)})
        assert res.returncode == 2
        assert "no .whl/" in res.stderr and "wheels" in res.stderr
        (tmp_path / ".whl").mkdir()  # a folder without wheels is refused the same way
        res = self.run(script, "rehearse", env={"REHEARSE_VENV": str(venv)})
        assert res.returncode == 2 and "no .whl/" in res.stderr
        assert not venv.exists()  # refused before it made anything

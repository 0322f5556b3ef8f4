"""python -m rl.core.plot: learning curves from CSV logs, seeds grouped and shaded."""

from __future__ import annotations

import runpy
import sys
import warnings

import numpy as np
import pytest

from rl.core.loggers import CSVLogger
from rl.core.plot import _mean_band, group_runs, load_runs, plot_runs


def _run_module(argv):
    """``python -m rl.core.plot ARGV``, in this process."""
    saved = sys.argv
    sys.argv = ["rl.core.plot", *argv]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # runpy: already imported
            runpy.run_module("rl.core.plot", run_name="__main__")
    except SystemExit as exit_:
        if exit_.code not in (0, None):
            raise
    finally:
        sys.argv = saved


def _write_runs(root, algo, seeds, slope):
    for seed in seeds:
        logger = CSVLogger(f"{algo}_seed{seed}", log_dir=root)
        for step in range(0, 1000, 100):
            logger.log_scalar("r_evaluation", slope * step + seed, step=step)
            logger.log_scalar("loss", 1.0 / (1 + step), step=step)


def test_runs_are_loaded_and_grouped_by_seed(tmp_path):
    _write_runs(tmp_path / "ppo", "ppo", [0, 1, 2], 0.1)
    runs = load_runs(tmp_path / "ppo")
    assert sorted(runs) == ["ppo_seed0", "ppo_seed1", "ppo_seed2"]
    steps, values = runs["ppo_seed1"]["r_evaluation"]
    np.testing.assert_array_equal(steps, np.arange(0, 1000, 100))
    np.testing.assert_allclose(values, 0.1 * steps + 1)
    groups = group_runs(runs)
    assert list(groups) == ["ppo"] and len(groups["ppo"]) == 3
    x, mean, std = _mean_band([r["r_evaluation"] for r in groups["ppo"]], smooth=1)
    np.testing.assert_allclose(mean, 0.1 * x + 1)  # seeds 0, 1, 2 -> offset mean 1
    np.testing.assert_allclose(std, np.full_like(x, np.std([0, 1, 2])))


def test_cli_draws_several_runs_on_one_figure(tmp_path):
    _write_runs(tmp_path / "ppo", "ppo", [0, 1], 0.1)
    _write_runs(tmp_path / "sac", "sac", [0, 1, 2], 0.2)
    out = tmp_path / "curves.png"
    argv = [str(tmp_path / "ppo"), str(tmp_path / "sac"), "-o", str(out), "-k", "r_evaluation"]
    _run_module([*argv, "--smooth", "2"])
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    image = matplotlib.image.imread(out)
    assert image.shape[0] > 100 and image.shape[1] > 100
    # two curves drawn in two colours (C0 blue, C1 orange) with their shaded bands
    pixels = image[..., :3].reshape(-1, 3)
    blue = np.abs(pixels - np.array([0.12, 0.47, 0.71])).max(1) < 0.05
    orange = np.abs(pixels - np.array([1.0, 0.5, 0.05])).max(1) < 0.05
    assert blue.sum() > 50 and orange.sum() > 50


def test_errors(tmp_path, capsys):
    with pytest.raises(FileNotFoundError, match="no log directory"):
        plot_runs([tmp_path / "missing"], tmp_path / "x.png")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no CSV run"):
        plot_runs([tmp_path / "empty"], tmp_path / "x.png")
    _write_runs(tmp_path / "ppo", "ppo", [0], 0.1)
    with pytest.raises(ValueError, match="no scalar 'r_train' in the logs"):
        plot_runs([tmp_path / "ppo"], tmp_path / "x.png", keys=["r_train"])
    with pytest.raises(SystemExit) as exit_info:
        _run_module([str(tmp_path / "missing")])
    assert exit_info.value.code == 2
    assert "no log directory" in capsys.readouterr().err

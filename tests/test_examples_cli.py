"""Every example takes its flags without naming a preset (``ppo.py --seed 7``)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import _offpolicy  # noqa: E402
import ppo  # noqa: E402
import sac  # noqa: E402


def test_ppo_flags_without_a_preset_take_the_default_one():
    cfg = ppo.cli(["--seed", "7"])
    assert cfg.seed == 7 and cfg == ppo.cli(["cartpole", "--seed", "7"])
    assert ppo.cli([]).seed == ppo.PRESETS["cartpole"][1].seed


def test_ppo_a_named_preset_still_selects_it():
    name = next(n for n in ppo.PRESETS if n != "cartpole")
    cfg = ppo.cli([name, "--seed", "3"])
    assert cfg.seed == 3 and cfg.env_id == ppo.PRESETS[name][1].env_id


def test_offpolicy_cli_flags_first():
    cfg = _offpolicy.cli(sac.Config, sac.PRESETS, "pendulum", "sac", ["--seed", "5"])
    assert cfg.seed == 5


def test_offpolicy_cli_one_preset_accepts_its_name():
    args = ["--seed", "5", "--total-frames", "300"]
    cfg = _offpolicy.cli(sac.Config, sac.PRESETS, "pendulum", "sac", ["pendulum", *args])
    assert cfg == _offpolicy.cli(sac.Config, sac.PRESETS, "pendulum", "sac", args)
    assert (cfg.seed, cfg.total_frames) == (5, 300)
    with pytest.raises(SystemExit):  # another name is not a preset
        _offpolicy.cli(sac.Config, sac.PRESETS, "pendulum", "sac", ["hopper", *args])


def test_unknown_flag_is_still_an_error():
    with pytest.raises(SystemExit):
        ppo.cli(["--no-such-flag", "1"])

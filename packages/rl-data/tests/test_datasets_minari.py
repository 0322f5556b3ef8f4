"""Offline datasets: ``MinariExperienceReplay`` over tiny Minari datasets made here, the
memory-mapped cache, ``BaseDatasetExperienceReplay.preprocess`` and the dataset registry.

Every dataset is written with ``minari.create_dataset_from_buffers`` from arrays built in
this file, so each sampled transition is checked against the arrays given to minari. No
test touches the network: downloads are replaced by a function that fails.
"""

from __future__ import annotations

import functools
import shutil
import warnings

import gymnasium as gym
import minari
import numpy as np
import pytest
import torch
from minari.data_collector import EpisodeBuffer
from tensordict import TensorDict

from rl.core import Bounded, Categorical, Composite, Unbounded
from rl.data import (
    LazyTensorStorage,
    OfflineToOnlineReplayBuffer,
    ReplayBuffer,
    prefill_replay_buffer,
)
from rl.data.datasets import (
    BaseDatasetExperienceReplay,
    MinariExperienceReplay,
    _registry,
    load_dataset,
    register_dataset,
)

CARTPOLE_ID = "cartpole/hand-v0"
DICT_ID = "toy/dict-v0"
LENGTHS = (3, 5, 2)
# how each episode ends: (terminated, truncated) at its last step
ENDINGS = ((True, False), (False, True), (True, False))


def _cartpole_episode(ep: int, steps: int) -> dict[str, np.ndarray]:
    """Hand-made values, distinct per (episode, step, feature), inside CartPole's bounds."""
    t = np.arange(steps + 1)[:, None]
    j = np.arange(4)[None, :]
    terminated = np.zeros(steps, dtype=bool)
    truncated = np.zeros(steps, dtype=bool)
    terminated[-1], truncated[-1] = ENDINGS[ep]
    return {
        "observations": (0.001 * (100 * ep + 10 * t + j)).astype(np.float32),
        "actions": (np.arange(steps) + ep) % 2,
        "rewards": 10.0 * ep + np.arange(steps) + 0.5,
        "terminations": terminated,
        "truncations": truncated,
        # one info entry with the reset value (steps + 1), one without it (steps)
        "infos": {
            "clock": 100.0 * ep + np.arange(steps + 1),
            "bonus": -(np.arange(steps) + 1).astype(np.int64),
        },
    }


def _make_minari(dataset_id, episodes, **kwargs):
    buffers = [EpisodeBuffer(id=i, **episode) for i, episode in enumerate(episodes)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # minari asks for an author, a code link, ...
        minari.create_dataset_from_buffers(dataset_id, buffers, **kwargs)


@pytest.fixture
def minari_path(tmp_path, monkeypatch):
    """Minari's local folder in tmp, holding the CartPole and the Dict-observation datasets."""
    path = tmp_path / "minari"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(path))
    episodes = [_cartpole_episode(ep, n) for ep, n in enumerate(LENGTHS)]
    _make_minari(CARTPOLE_ID, episodes, env=gym.make("CartPole-v1"))
    dict_space = gym.spaces.Dict(
        {
            "pos": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
            "vel": gym.spaces.Box(-np.inf, np.inf, (1,), np.float64),
        }
    )
    dict_episode = {
        "observations": {
            "pos": np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]], dtype=np.float32),
            "vel": np.array([[1.0], [2.0], [3.0]]),
        },
        "actions": np.array([[0.25], [-0.5]], dtype=np.float32),
        "rewards": np.array([1.5, 2.5]),
        "terminations": np.array([False, False]),
        "truncations": np.array([False, True]),
    }
    _make_minari(
        DICT_ID,
        [dict_episode],
        observation_space=dict_space,
        action_space=gym.spaces.Box(-2.0, 2.0, (1,), np.float32),
    )
    return path


@pytest.fixture
def no_download(monkeypatch):
    """minari's download replaced by one that fails as it does without network access;
    the server probe goes to a closed local port (no test reaches the network)."""
    calls = []
    monkeypatch.delenv("MINARI_REMOTE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)

    def download_dataset(dataset_id, *args, **kwargs):
        calls.append(dataset_id)
        raise ConnectionError("Name or service not known")

    monkeypatch.setattr(minari, "download_dataset", download_dataset)
    return calls


def _expected_cartpole() -> TensorDict:
    """The TED transitions of the CartPole dataset, by a plain loop over the episodes."""
    rows = []
    for ep, steps in enumerate(LENGTHS):
        e = _cartpole_episode(ep, steps)
        bonus = np.concatenate([[0], e["infos"]["bonus"]])  # no reset value: zero there
        for t in range(steps):
            term, trunc = bool(e["terminations"][t]), bool(e["truncations"][t])
            rows.append(
                TensorDict(
                    {
                        "episode": torch.tensor(ep),
                        "observation": torch.tensor(e["observations"][t]),
                        "action": torch.tensor(e["actions"][t]),
                        "info": {
                            "clock": torch.tensor(e["infos"]["clock"][t]),
                            "bonus": torch.tensor(bonus[t]),
                        },
                        "next": {
                            "observation": torch.tensor(e["observations"][t + 1]),
                            "reward": torch.tensor([e["rewards"][t]]),
                            "terminated": torch.tensor([term]),
                            "truncated": torch.tensor([trunc]),
                            "done": torch.tensor([term or trunc]),
                            "info": {
                                "clock": torch.tensor(e["infos"]["clock"][t + 1]),
                                "bonus": torch.tensor(bonus[t + 1]),
                            },
                        },
                    },
                    batch_size=[],
                )
            )
    return torch.stack(rows)


def _assert_same(actual: TensorDict, expected: TensorDict) -> None:
    actual_keys = set(actual.keys(True, True)) - {"index"}
    assert actual_keys == set(expected.keys(True, True))
    for key in expected.keys(True, True):
        torch.testing.assert_close(actual[key], expected[key], rtol=0, atol=0, msg=str(key))


def _cartpole(root, **kwargs) -> MinariExperienceReplay:
    kwargs.setdefault("load_from_local_minari", True)
    return MinariExperienceReplay(CARTPOLE_ID, batch_size=4, root=root, **kwargs)


class TestMinariExperienceReplay:
    def test_transitions_equal_the_episodes_written(self, minari_path, tmp_path):
        data = _cartpole(tmp_path / "rl")
        expected = _expected_cartpole()
        assert len(data) == sum(LENGTHS)
        _assert_same(data[:], expected)
        assert data[:]["next", "reward"].dtype == torch.float64  # as minari stores it

    def test_sampled_transitions_are_rows_of_the_dataset(self, minari_path, tmp_path):
        data = _cartpole(tmp_path / "rl")
        expected = _expected_cartpole()
        torch.manual_seed(0)
        sample = data.sample()
        assert sample.batch_size == torch.Size([4])
        _assert_same(sample, expected[sample["index"]])
        sample = data.sample(7)
        assert sample.batch_size == torch.Size([7])
        _assert_same(sample, expected[sample["index"]])

    def test_specs_describe_the_stored_data(self, minari_path, tmp_path):
        data = _cartpole(tmp_path / "rl")
        obs_spec = data.metadata["observation_space"]
        action_spec = data.metadata["action_space"]
        space = gym.make("CartPole-v1").observation_space
        assert isinstance(obs_spec, Bounded)
        torch.testing.assert_close(obs_spec.space.low, torch.as_tensor(space.low))
        torch.testing.assert_close(obs_spec.space.high, torch.as_tensor(space.high))
        assert isinstance(action_spec, Categorical) and action_spec.space.n == 2
        rows = data[:]
        for key, spec in (("observation", obs_spec), ("action", action_spec)):
            assert rows[key].shape == torch.Size([len(data), *spec.shape]), key
            assert rows[key].dtype == spec.dtype, key
            assert spec.is_in(rows[key][0]), key
        assert rows["next", "observation"].dtype == obs_spec.dtype
        assert data.metadata["total_steps"] == sum(LENGTHS)
        assert data.metadata["total_episodes"] == len(LENGTHS)
        assert data.metadata["env_id"] == "CartPole-v1"

    def test_dict_observations_are_nested(self, minari_path, tmp_path):
        data = MinariExperienceReplay(
            DICT_ID, batch_size=2, root=tmp_path / "rl", load_from_local_minari=True
        )
        rows = data[:]
        torch.testing.assert_close(
            rows["observation", "pos"], torch.tensor([[0.1, 0.2], [0.3, 0.4]])
        )
        torch.testing.assert_close(
            rows["next", "observation", "vel"], torch.tensor([[2.0], [3.0]], dtype=torch.float64)
        )
        torch.testing.assert_close(rows["action"], torch.tensor([[0.25], [-0.5]]))
        assert rows["next", "done"].squeeze(-1).tolist() == [False, True]
        assert "info" not in rows.keys()  # no infos were stored
        obs_spec = data.metadata["observation_space"]
        assert isinstance(obs_spec, Composite)
        assert isinstance(obs_spec["pos"], Bounded) and obs_spec["pos"].dtype == torch.float32
        assert isinstance(obs_spec["vel"], Unbounded) and obs_spec["vel"].dtype == torch.float64
        assert obs_spec.is_in(rows["observation"][0])
        assert isinstance(data.metadata["action_space"], Bounded)

    def test_a_second_load_reads_the_cache_not_minari(
        self, minari_path, tmp_path, no_download, monkeypatch
    ):
        root = tmp_path / "rl"
        _cartpole(root)
        assert (root / CARTPOLE_ID / "env_metadata.json").exists()
        shutil.rmtree(minari_path)  # the source is gone: only the cache is left

        def no_minari(*args, **kwargs):
            raise AssertionError("minari was read")

        monkeypatch.setattr(minari, "load_dataset", no_minari)
        for download in (True, False):
            data = _cartpole(root, download=download, load_from_local_minari=False)
            _assert_same(data[:], _expected_cartpole())
            assert isinstance(data.metadata["action_space"], Categorical)
        assert no_download == []

    def test_split_trajs_pads_each_episode_to_a_row(self, minari_path, tmp_path):
        data = _cartpole(tmp_path / "rl", split_trajs=True)
        rows = data[:]
        assert rows.batch_size == torch.Size([len(LENGTHS), max(LENGTHS)])
        assert data.data_path == tmp_path / "rl" / (CARTPOLE_ID + "_split")
        expected = _expected_cartpole()
        start = 0
        for ep, steps in enumerate(LENGTHS):
            mask = rows["mask"][ep]
            assert mask.tolist() == [True] * steps + [False] * (max(LENGTHS) - steps)
            _assert_same(
                rows[ep, :steps].exclude("mask", "traj_ids"), expected[start : start + steps]
            )
            assert rows["traj_ids"][ep, :steps].tolist() == [ep] * steps
            # padding is zeros
            assert not rows["next", "reward"][ep, steps:].any()
            assert not rows["observation"][ep, steps:].any()
            start += steps

    def test_split_is_made_from_the_cache(self, minari_path, tmp_path, no_download):
        root = tmp_path / "rl"
        flat = _cartpole(root)
        shutil.rmtree(minari_path)
        split = _cartpole(root, split_trajs=True, load_from_local_minari=False)
        assert split[:].batch_size == torch.Size([len(LENGTHS), max(LENGTHS)])
        torch.testing.assert_close(split[:]["action"][split[:]["mask"]], flat[:]["action"])
        assert no_download == []

    def test_a_new_conversion_drops_the_old_split(self, minari_path, tmp_path, no_download):
        # a split made from an earlier conversion must not outlive it: converting again
        # without split_trajs leaves no stale split for a later split_trajs load to take
        root = tmp_path / "rl"
        assert _cartpole(root, split_trajs=True)[:].shape[0] == len(LENGTHS)
        shutil.rmtree(minari_path / CARTPOLE_ID)
        episodes = [_cartpole_episode(ep, n) for ep, n in enumerate(LENGTHS[:2])]
        _make_minari(CARTPOLE_ID, episodes, env=gym.make("CartPole-v1"))
        assert len(_cartpole(root)) == sum(LENGTHS[:2])
        split = _cartpole(root, split_trajs=True, load_from_local_minari=False)
        assert split[:].shape[0] == 2
        assert no_download == []

    def test_unreachable_server_fails_before_downloading(self, minari_path, tmp_path, no_download):
        with pytest.raises(
            RuntimeError,
            match=r"could not download the Minari dataset 'cartpole/elsewhere-v0' "
            r"\(OSError: 127.0.0.1:9 is unreachable: .*downloads are unavailable",
        ):
            MinariExperienceReplay("cartpole/elsewhere-v0", batch_size=2, root=tmp_path / "rl")
        assert no_download == []  # minari's download (and its retries) never started
        assert not (tmp_path / "rl" / "cartpole" / "elsewhere-v0").exists()

    def test_available_datasets_without_network(self, no_download):
        with pytest.raises(
            RuntimeError, match=r"could not list Minari's remote datasets .*127.0.0.1:9"
        ):
            MinariExperienceReplay.available_datasets  # noqa: B018

    def test_download_failure_names_the_dataset(
        self, minari_path, tmp_path, no_download, monkeypatch
    ):
        monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")  # no probe behind a proxy
        with pytest.raises(
            RuntimeError,
            match=r"could not download the Minari dataset 'cartpole/elsewhere-v0' "
            r"\(ConnectionError: Name or service not known\); downloads are unavailable",
        ):
            MinariExperienceReplay("cartpole/elsewhere-v0", batch_size=2, root=tmp_path / "rl")
        assert no_download == ["cartpole/elsewhere-v0"]
        assert not (tmp_path / "rl" / "cartpole" / "elsewhere-v0").exists()

    def test_a_failed_forced_download_keeps_the_cache(self, minari_path, tmp_path, no_download):
        root = tmp_path / "rl"
        _cartpole(root)
        with pytest.raises(RuntimeError, match="'cartpole/hand-v0'.*is unreachable"):
            _cartpole(root, download="force", load_from_local_minari=False)
        data = _cartpole(root, download=False, load_from_local_minari=False)
        assert len(data) == sum(LENGTHS)
        # nothing half-written is left next to the dataset
        assert sorted(p.name for p in (root / "cartpole").iterdir()) == ["hand-v0"]

    def test_unknown_local_dataset_names_the_id(self, minari_path, tmp_path):
        with pytest.raises(FileNotFoundError, match=r"'cartpole/nope-v0' is not in Minari's local"):
            MinariExperienceReplay(
                "cartpole/nope-v0", batch_size=2, root=tmp_path / "rl", load_from_local_minari=True
            )

    def test_no_download_and_no_cache_names_the_id(self, minari_path, tmp_path):
        with pytest.raises(FileNotFoundError, match=r"'cartpole/hand-v0' is not under root"):
            _cartpole(tmp_path / "rl", download=False, load_from_local_minari=False)

    def test_bad_download_value(self, tmp_path):
        with pytest.raises(ValueError, match="download is True, False or 'force', got 'yes'"):
            MinariExperienceReplay(CARTPOLE_ID, batch_size=2, root=tmp_path, download="yes")

    def test_the_dataset_is_read_only(self, minari_path, tmp_path):
        data = _cartpole(tmp_path / "rl")
        with pytest.raises(RuntimeError, match="doesn't allow writing"):
            data.extend(data[:2])
        assert len(data) == sum(LENGTHS)

    def test_delete_removes_the_files(self, minari_path, tmp_path):
        data = _cartpole(tmp_path / "rl")
        assert data.data_path.exists()
        data.delete()
        assert not data.data_path.exists()


def _add_reward_sum(td):
    return td.set("reward_sum", td["next", "reward"].sum(-1) + td["action"])


class TestPreprocess:
    def test_in_process_with_a_lambda(self, minari_path, tmp_path):
        data = _cartpole(tmp_path / "rl")
        storage = data.preprocess(
            lambda td: td.select("action").set("double", 2 * td["action"]),
            num_workers=0,
            dest=tmp_path / "pre",
        )
        out = ReplayBuffer(storage=storage)[:]
        assert set(out.keys()) == {"action", "double"}
        torch.testing.assert_close(out["double"], 2 * data[:]["action"])
        assert (tmp_path / "pre").exists()

    def test_worker_processes_and_num_frames(self, minari_path, tmp_path):
        data = _cartpole(tmp_path / "rl")
        storage = data.preprocess(
            _add_reward_sum,
            num_workers=2,
            num_frames=6,
            mp_start_method="fork",
            generator=torch.Generator().manual_seed(0),
            dest=tmp_path / "pre",
        )
        out = ReplayBuffer(storage=storage)[:]
        rows = data[:6]
        assert out.batch_size == torch.Size([6])
        torch.testing.assert_close(
            out["reward_sum"], rows["next", "reward"].squeeze(-1) + rows["action"]
        )

    def test_unpicklable_fn_with_workers(self, minari_path, tmp_path):
        data = _cartpole(tmp_path / "rl")
        with pytest.raises(TypeError, match="cannot be pickled .*pass num_workers=0"):
            data.preprocess(lambda td: td, num_workers=2, dest=tmp_path / "pre")

    def test_the_base_class_is_abstract(self):
        with pytest.raises(TypeError, match="abstract"):
            BaseDatasetExperienceReplay(batch_size=2)


@pytest.fixture
def clean_registry():
    before = dict(_registry._DATASET_REGISTRY)
    yield
    _registry._DATASET_REGISTRY.clear()
    _registry._DATASET_REGISTRY.update(before)


class _Recorder:
    def __init__(self, dataset_id, **kwargs):
        self.dataset_id, self.kwargs = dataset_id, kwargs


class TestRegistry:
    def test_minari_prefix_builds_a_minari_dataset(self, minari_path, tmp_path):
        data = load_dataset(
            f"minari:{CARTPOLE_ID}", batch_size=3, root=tmp_path / "rl", load_from_local_minari=True
        )
        assert isinstance(data, MinariExperienceReplay)
        assert data.dataset_id == CARTPOLE_ID
        _assert_same(data[:], _expected_cartpole())
        assert data.sample().batch_size == torch.Size([3])

    def test_missing_prefix(self):
        with pytest.raises(ValueError, match=r"must be prefixed .*got 'hopper-medium-v2'"):
            load_dataset("hopper-medium-v2")

    def test_unknown_prefix(self):
        with pytest.raises(ValueError, match=r"Unknown dataset source 'mujoco'.*'minari'"):
            load_dataset("mujoco:hopper-v0")

    @pytest.mark.parametrize("prefix", ["d4rl", "openx", "atari_dqn", "vd4rl"])
    def test_download_only_sources_name_the_dataset(self, prefix):
        with pytest.raises(
            NotImplementedError,
            match=rf"'{prefix}' dataset 'some/data-v1'.*downloads are unavailable",
        ):
            load_dataset(f"{prefix}:some/data-v1", batch_size=2)

    def test_register_routes_id_and_kwargs(self, clean_registry):
        register_dataset("Toy", _Recorder)
        made = load_dataset("toy:demo:v1", batch_size=11)  # the id keeps later ':'
        assert isinstance(made, _Recorder)
        assert made.dataset_id == "demo:v1" and made.kwargs == {"batch_size": 11}
        assert load_dataset("TOY:x").dataset_id == "x"

    def test_register_twice_needs_replace(self, clean_registry):
        register_dataset("toy", _Recorder)
        with pytest.raises(KeyError, match="'toy' is registered already"):
            register_dataset("toy", dict)
        register_dataset("toy", lambda dataset_id, **kw: ("replaced", dataset_id), replace=True)
        assert load_dataset("toy:a") == ("replaced", "a")

    def test_import_string_resolved_on_use(self, clean_registry):
        register_dataset("lazy", f"{__name__}:_Recorder")
        assert _registry._DATASET_REGISTRY["lazy"] == f"{__name__}:_Recorder"
        assert load_dataset("lazy:x", root="r").kwargs == {"root": "r"}

    @pytest.mark.parametrize(
        "prefix, dataset, error, match",
        [
            ("", _Recorder, ValueError, "non-empty string without ':', got ''"),
            ("a:b", _Recorder, ValueError, "without ':', got 'a:b'"),
            ("toy", "no_colon", ValueError, "'module:attribute', got 'no_colon'"),
            ("toy", ":attr", ValueError, "'module:attribute', got ':attr'"),
            ("toy", 3, TypeError, "callable dataset factory .*got int"),
        ],
    )
    def test_bad_registrations(self, clean_registry, prefix, dataset, error, match):
        with pytest.raises(error, match=match):
            register_dataset(prefix, dataset)
        assert "toy" not in _registry._DATASET_REGISTRY


class TestOfflineToOnlineByName:
    def test_buffer_builds_the_named_dataset(self, minari_path, tmp_path):
        rb = OfflineToOnlineReplayBuffer(
            f"minari:{CARTPOLE_ID}",
            online_capacity=10,
            batch_size=5,
            root=tmp_path / "rl",
            load_from_local_minari=True,
        )
        assert isinstance(rb.offline_buffer, MinariExperienceReplay)
        assert rb.offline_buffer.root == tmp_path / "rl"
        sample = rb.sample()  # the online buffer is empty: all offline
        assert sample.batch_size == torch.Size([5])
        _assert_same(sample, _expected_cartpole()[sample["index"]])

    def test_prefill_copies_from_a_registered_name(self, minari_path, tmp_path, clean_registry):
        register_dataset(
            "mine",
            functools.partial(
                MinariExperienceReplay, root=tmp_path / "rl", load_from_local_minari=True
            ),
        )
        target = ReplayBuffer(storage=LazyTensorStorage(100))
        prefill_replay_buffer(target, f"mine:{CARTPOLE_ID}", n_samples=7, chunk_size=4)
        assert len(target) == 7
        copied = target[:]
        _assert_same(copied, _expected_cartpole()[copied["index"]])

"""EnvCreator: building envs from a factory, here or in another process."""

from __future__ import annotations

import functools
import pickle
import sys
import threading
from pathlib import Path

import pytest
import torch

from rl.envs import CartPoleEnv, EnvCreator, ParallelEnv

sys.path.insert(0, str(Path(__file__).parent))
from _batched_factories import CounterEnv, make_shared_state_env  # noqa: E402


class TestEnvCreator:
    def test_call_with_kwargs(self):
        creator = EnvCreator(CounterEnv, {"limit": 3.0, "truncate_at": 4})
        env = creator()
        assert isinstance(env, CounterEnv) and env.limit == 3.0 and env.truncate_at == 4
        # the creator's own kwargs win over the call's (TorchRL's order)
        assert creator(limit=5.0).limit == 3.0
        # a call's kwargs the creator does not name pass through
        assert EnvCreator(CounterEnv, {"limit": 3.0})(truncate_at=2).truncate_at == 2

    @pytest.mark.parametrize(
        "fn",
        [
            CounterEnv,
            functools.partial(CounterEnv, limit=2.0),
            lambda **kwargs: CounterEnv(limit=2.0, **kwargs),
        ],
        ids=["class", "partial", "lambda"],
    )
    def test_pickle_round_trip(self, fn):
        creator = EnvCreator(fn, {"truncate_at": 7})
        clone = pickle.loads(pickle.dumps(creator))
        env = clone()
        assert isinstance(env, CounterEnv) and env.truncate_at == 7
        assert clone.create_env_kwargs == {"truncate_at": 7}

    def test_wraps_another_creator(self):
        inner = EnvCreator(CounterEnv, {"limit": 2.0})
        outer = EnvCreator(inner, {"truncate_at": 3})
        env = outer()
        assert (env.limit, env.truncate_at) == (2.0, 3)

    def test_bad_arguments(self):
        with pytest.raises(TypeError, match="create_env_fn must be a callable returning an env"):
            EnvCreator(3)
        with pytest.raises(TypeError, match="create_env_kwargs must be a mapping"):
            EnvCreator(CounterEnv, [("limit", 2.0)])

    def test_unpicklable_factory(self):
        lock = threading.Lock()
        creator = EnvCreator(lambda: (lock, CounterEnv())[1])
        with pytest.raises(TypeError, match="cannot pickle the env factory"):
            creator.dumps()

    def test_default_start_method_is_fork_without_cuda(self):
        env = ParallelEnv(2, CartPoleEnv)
        assert env.mp_start_method == "fork"
        rollout = env.rollout(3, break_when_any_done=False)
        assert rollout.batch_size == (2, 3)
        env.close()

    def test_lambda_in_spawned_workers(self):
        env = ParallelEnv(
            1, EnvCreator(lambda: CartPoleEnv(max_episode_steps=3)), mp_start_method="spawn"
        )
        rollout = env.rollout(3, break_when_any_done=False)
        assert rollout["next", "truncated"].squeeze(-1).tolist() == [[False, False, True]]
        assert rollout["next", "observation"].dtype == torch.float32
        env.close()


def _vecnorm_count(creator: EnvCreator) -> int:
    (state,) = (v for k, v in creator.state_dict().items() if k.endswith("_extra_state"))
    return int(state["count.-|-.observation"])


class TestSharedState:
    """What TorchRL's EnvCreator shares with the envs it builds: a VecNorm's statistics
    (its state dict, in shared memory) and a TrajCounter's counter (a multiprocessing
    value), here and in worker processes."""

    def test_kwargs_and_variants(self):
        creator = EnvCreator(CounterEnv, {"limit": 3.0}, truncate_at=4)
        assert creator.create_env_kwargs == {"limit": 3.0, "truncate_at": 4}
        variant = creator.make_variant(truncate_at=2)
        assert (variant().truncate_at, creator().truncate_at) == (2, 4)
        assert variant.meta_data is creator.meta_data
        assert creator.meta_data.batch_size == torch.Size([])
        assert "observation" in creator.meta_data.specs["output_spec", "full_observation_spec"]

    def test_envs_of_this_process_share_the_statistics(self):
        creator = EnvCreator(make_shared_state_env)
        assert _vecnorm_count(creator) == 2  # the shadow env's reset and step
        first, second = creator(), creator()
        first.rollout(3)  # a reset and 3 steps
        assert _vecnorm_count(creator) == 6
        second.rollout(2)
        assert _vecnorm_count(creator) == 9
        # one counter: each env's trajectory gets its own id
        assert first.rollout(1)["traj_count"].item() != second.rollout(1)["traj_count"].item()

    def test_forked_workers_share_statistics_and_counter(self):
        creator = EnvCreator(make_shared_state_env)
        env = ParallelEnv(2, [creator, creator.make_variant(truncate_at=None)])
        try:
            rollout = env.rollout(5, break_when_any_done=False)
        finally:
            env.close()
        # both workers updated the main process's statistics: 2 + 2 x (reset + 5 steps)
        assert _vecnorm_count(creator) == 2 + 2 * 6
        ids = rollout["traj_count"].view(2, -1)
        assert ids[0].unique().numel() == ids[1].unique().numel() == 1
        assert {ids[0, 0].item(), ids[1, 0].item()} == {1, 2}  # the shadow env had id 0

    def test_spawned_worker_shares_statistics_and_counter(self):
        from rl.envs import TrajCounter

        # the counter travels twice: in the factory's arguments and among the values
        # the shadow env holds (pickled once, in one pass)
        counter = TrajCounter()
        creator = EnvCreator(functools.partial(make_shared_state_env, counter=counter))
        env = ParallelEnv(1, creator, mp_start_method="spawn")
        try:
            rollout = env.rollout(4, break_when_any_done=False)
        finally:
            env.close()
        assert _vecnorm_count(creator) == 2 + 5
        assert rollout["traj_count"].view(-1).tolist() == [1] * 4
        assert counter._traj_count.value == 2  # the worker's trajectory counted here
        assert creator().rollout(1)["traj_count"].item() == 2

    def test_legacy_vecnorm_statistics_shared_without_warning(self):
        # the shadow env's statistics are already in shared memory: the envs the creator
        # builds load them as they are, with no "not shared" warning
        import warnings

        from rl.envs import TransformedEnv, VecNorm

        creator = EnvCreator(
            lambda: TransformedEnv(CounterEnv(), VecNorm(in_keys=["observation"], decay=1.0))
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            env = creator()
        ((key, state),) = creator.state_dict().items()
        assert env.transform[0].stats["observation_count"].data_ptr() == (
            state["observation_count"].data_ptr()
        )
        env.rollout(2)
        assert state["observation_count"].item() == 2 + 3

    def test_a_pickled_copy_keeps_statistics_not_counters(self):
        creator = EnvCreator(make_shared_state_env)
        copy = pickle.loads(pickle.dumps(creator))
        assert copy._mp_values == [] and _vecnorm_count(copy) == 2
        copy().rollout(1)
        assert (_vecnorm_count(copy), _vecnorm_count(creator)) == (4, 2)

    def test_load_state_dict_reaches_built_envs(self):
        creator = EnvCreator(make_shared_state_env)
        env = creator()
        state = creator.state_dict()
        key = next(k for k in state if k.endswith("_extra_state"))
        new = {key: {name: torch.zeros_like(t) for name, t in state[key].items()}}
        creator.load_state_dict(new)
        assert _vecnorm_count(creator) == 0
        env.rollout(1)
        assert _vecnorm_count(creator) == 2
        with pytest.raises(KeyError, match="'nope' is not in the shared state"):
            creator.load_state_dict({"nope": torch.zeros(1)})

    def test_plain_tensors_are_not_shared(self):
        from collections import OrderedDict

        from tensordict import TensorDict

        creator = EnvCreator(CounterEnv)
        shared = TensorDict(a=torch.zeros(2))
        state = OrderedDict(buffer=torch.zeros(1), td=shared, nested=OrderedDict(b=torch.ones(1)))
        creator.share_memory(state)
        assert list(state) == ["td", "nested"] and list(state["nested"]) == []
        assert shared.is_shared()

    def test_meta_data_of_a_batched_env_creator(self):
        with pytest.raises(RuntimeError, match="meta_data is None in EnvCreator"):
            _ = EnvCreator._plain(CounterEnv, {}).meta_data

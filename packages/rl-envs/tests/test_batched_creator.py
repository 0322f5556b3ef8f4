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
from _batched_factories import CounterEnv  # noqa: E402


class TestEnvCreator:
    def test_call_with_kwargs(self):
        creator = EnvCreator(CounterEnv, {"limit": 3.0, "truncate_at": 4})
        env = creator()
        assert isinstance(env, CounterEnv) and env.limit == 3.0 and env.truncate_at == 4
        assert creator(limit=5.0).limit == 5.0  # call kwargs override

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

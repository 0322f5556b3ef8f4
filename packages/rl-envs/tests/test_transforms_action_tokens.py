"""ActionTokenizerTransform: tokens on the data path, decoded actions on the env path."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictSequential

from rl.core import Categorical
from rl.core.vla import ACTION_TOKENS_KEY, UniformActionTokenizer
from rl.data import LazyTensorStorage, TensorDictReplayBuffer
from rl.envs import PendulumEnv, SerialEnv, TransformedEnv, check_env_specs
from rl.envs.transforms import ActionTokenizerTransform, Compose


def _tok(n=256, low=-1.0, high=1.0):
    return UniformActionTokenizer(n, low=low, high=high)


class TestActionTokenizerTransform:
    def test_encode_forward_and_inverse(self):
        t = ActionTokenizerTransform(_tok())
        td = t(TensorDict({"action": torch.tensor([[-1.0, 0.0, 1.0]])}, [1]))
        assert td[ACTION_TOKENS_KEY].tolist() == [[0, 128, 255]]
        back = t.inv(TensorDict({ACTION_TOKENS_KEY: td[ACTION_TOKENS_KEY]}, [1]))
        torch.testing.assert_close(
            back["action"], torch.tensor([[-1 + 1 / 256, 1 / 256, 1 - 1 / 256]])
        )
        # no tokens and no env: raw data passes through (a buffer's extend)
        raw = t.inv(TensorDict({"action": torch.zeros(1, 3)}, [1]))
        assert ACTION_TOKENS_KEY not in raw.keys(True)
        assert Compose(ActionTokenizerTransform(_tok()))(
            TensorDict({"action": torch.tensor([[1.0]])}, [1])
        )[ACTION_TOKENS_KEY].tolist() == [[255]]

    def test_decode_mode(self):
        tok = _tok()
        t = ActionTokenizerTransform(tok, mode="decode")
        assert t.in_keys == [ACTION_TOKENS_KEY] and t.out_keys == ["action"]
        tokens = torch.tensor([[10, 200]])
        out = TensorDictSequential(t)(TensorDict({ACTION_TOKENS_KEY: tokens}, [1]))
        torch.testing.assert_close(out["action"], tok.decode(tokens))
        inv = t.inv(TensorDict({"action": torch.tensor([[0.0]])}, [1]))
        assert inv[ACTION_TOKENS_KEY].tolist() == [[128]]
        env = TransformedEnv(PendulumEnv(), ActionTokenizerTransform(tok, mode="decode"))
        assert "action" in env.full_action_spec.keys()

    def test_env_decodes_tokens(self):
        tok = _tok(16, -2.0, 2.0)
        env = TransformedEnv(PendulumEnv(), ActionTokenizerTransform(tok))
        check_env_specs(env)
        spec = env.full_action_spec[ACTION_TOKENS_KEY]
        assert isinstance(spec, Categorical) and spec.shape == (1,) and spec.n == 16
        assert "action" not in env.full_action_spec.keys()
        seen = []

        class Capture(PendulumEnv):
            def _step(self, td):
                seen.append(td["action"].clone())
                return super()._step(td)

        env = TransformedEnv(Capture(), ActionTokenizerTransform(tok))
        td = env.reset()
        td[ACTION_TOKENS_KEY] = torch.tensor([15])
        env.step(td)
        # the base env received the decoded torque: the centre of the last bin
        torch.testing.assert_close(seen[0], torch.tensor([2.0 - 4.0 / 32]))
        rollout = env.rollout(3)
        assert rollout[ACTION_TOKENS_KEY].dtype == torch.long
        assert (rollout[ACTION_TOKENS_KEY] < 16).all()

    def test_env_step_without_tokens_raises(self):
        env = TransformedEnv(PendulumEnv(), ActionTokenizerTransform(_tok()))
        td = env.reset()
        td["action"] = torch.zeros(1)
        with pytest.raises(KeyError, match="vla_action.*tokens"):
            env.step(td)

    def test_batched_env_spec(self):
        env = TransformedEnv(
            SerialEnv(2, PendulumEnv), ActionTokenizerTransform(_tok(8, -2.0, 2.0))
        )
        assert env.full_action_spec[ACTION_TOKENS_KEY].shape == (2, 1)
        check_env_specs(env)

    def test_replay_buffer_tokenizes_on_sample(self):
        rb = TensorDictReplayBuffer(
            storage=LazyTensorStorage(10),
            transform=ActionTokenizerTransform(_tok(16)),
            batch_size=4,
        )
        rb.extend(TensorDict({"action": torch.rand(10, 3) * 2 - 1}, [10]))
        sample = rb.sample()
        assert sample[ACTION_TOKENS_KEY].shape == (4, 3)
        torch.testing.assert_close(sample[ACTION_TOKENS_KEY], _tok(16).encode(sample["action"]))

    def test_nested_keys(self):
        t = ActionTokenizerTransform(_tok(64), in_key="chunk", out_key=("tokens", "action"))
        out = t(TensorDict({"chunk": torch.zeros(2, 3, 4, 5)}, [2, 3]))
        assert out["tokens", "action"].shape == (2, 3, 4, 5)

    def test_bad_arguments(self):
        with pytest.raises(TypeError, match="must be an ActionTokenizerBase, got object"):
            ActionTokenizerTransform(object())
        with pytest.raises(ValueError, match="mode must be 'encode' or 'decode', got 'x'"):
            ActionTokenizerTransform(_tok(), mode="x")
        with pytest.raises(KeyError, match="found no 'act' in the env's action spec"):
            _ = TransformedEnv(
                PendulumEnv(), ActionTokenizerTransform(_tok(), in_key="act")
            ).full_action_spec
        with pytest.raises(KeyError, match=r"\(encode\) expected 'action'"):
            ActionTokenizerTransform(_tok())(TensorDict({}, []))

"""VLAWrapperBase, TinyVLA and LeRobotPolicyWrapper: keys, shapes and token log-probs."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from tensordict import NonTensorStack, TensorDict
from tensordict.nn import InteractionType

from rl.core import ExplorationType, set_exploration_type
from rl.core.vla import UniformActionTokenizer, VLAAction, VLAImages, VLAObservation
from rl.modules import LeRobotPolicyWrapper, MultiStepActorWrapper, TinyVLA, VLAWrapperBase


def _obs(batch=2, with_state=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = {"image": torch.randint(0, 256, (batch, 3, 16, 16), generator=g, dtype=torch.uint8)}
    if with_state:
        obs["state"] = torch.randn(batch, 5, generator=g)
    instructions = NonTensorStack(*[f"task {i}" for i in range(batch)])
    return TensorDict(
        {"observation": obs, "language_instruction": instructions}, batch_size=[batch]
    )


def _token_policy(**kwargs):
    torch.manual_seed(0)
    kwargs = {"action_dim": 3, "chunk_size": 2, "action_head": "tokens", "vocab_size": 16, **kwargs}
    return TinyVLA(**kwargs)


class TestVLAWrapperBase:
    @pytest.mark.parametrize(
        "kwargs, match",
        [
            (
                {"action_head": "diffusion"},
                "action_head must be 'continuous' or 'tokens', got 'diffusion'",
            ),
            ({"input_mode": "features"}, "input_mode must be"),
            ({"output_mode": "actions"}, "output_mode must be"),
            ({"action_head": "tokens"}, "needs vocab_size"),
            ({"mode": "beam"}, "mode must be 'greedy' or 'sample'"),
            (
                {"default_interaction_type": "beam"},
                "default_interaction_type must be an InteractionType",
            ),
            (
                {"log_probs_mode": "word", "action_head": "tokens", "vocab_size": 4},
                "log_probs_mode must be",
            ),
            ({"inplace": "maybe"}, "inplace must be"),
            ({"num_samples": 0}, "num_samples must be at least 1, got 0"),
        ],
    )
    def test_bad_arguments(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            VLAWrapperBase(action_dim=2, chunk_size=2, **kwargs)

    def test_hook_is_abstract(self):
        with pytest.raises(NotImplementedError, match="must implement _predict"):
            VLAWrapperBase(action_dim=2, chunk_size=2)(TensorDict({}, batch_size=[]))

    def test_mode_alias(self):
        assert VLAWrapperBase(
            action_dim=1, chunk_size=1, mode="sample"
        ).default_interaction_type == (InteractionType.RANDOM)

    def test_set_keys_moves_default_fields_with_the_group(self):
        policy = VLAWrapperBase(action_dim=1, chunk_size=1, action_chunk_key="my_chunk")
        policy.set_keys(vla_action=("pred", "va"), instruction="instr")
        keys = policy.tensor_keys
        assert keys.action_tokens == ("pred", "va", "tokens")
        assert keys.action_chunk == "my_chunk"  # given explicitly: kept
        assert "instr" in policy.in_keys
        with pytest.raises(ValueError, match="'nope' is not an accepted key"):
            policy.set_keys(nope="x")


class TestTinyVLA:
    def test_continuous_outputs(self):
        policy = TinyVLA(action_dim=7, chunk_size=4)
        assert policy.in_keys == [
            ("observation", "image"),
            ("observation", "state"),
            "language_instruction",
        ]
        assert policy.out_keys == [("vla_action", "chunk")]
        out = policy(_obs())
        assert isinstance(out["vla_action"], VLAAction)
        assert out["vla_action"].chunk.shape == (2, 4, 7)
        torch.testing.assert_close(out["vla_action"].chunk, out["vla_action", "chunk"])

    def test_plain_fields_without_container(self):
        out = TinyVLA(action_dim=2, chunk_size=3, return_vla_action_container=False)(_obs())
        assert not isinstance(out["vla_action"], VLAAction)
        assert out["vla_action", "chunk"].shape == (2, 3, 2)

    def test_instruction_conditions_the_output(self):
        policy = TinyVLA(action_dim=2, chunk_size=1, use_state=False)
        td = _obs(with_state=False)
        td["observation", "image"] = td["observation", "image"][:1].expand(2, 3, 16, 16).clone()
        same = td.clone()
        same["language_instruction"] = NonTensorStack("task 0", "task 0")
        out_a = policy(td.clone())["vla_action", "chunk"]
        out_b = policy(same)["vla_action", "chunk"]
        torch.testing.assert_close(out_a[0], out_b[0])
        torch.testing.assert_close(out_b[0], out_b[1])
        assert not torch.allclose(out_a[0], out_a[1])

    def test_preprocessed_observation(self):
        td = _obs()
        obs = VLAObservation(
            images=VLAImages(image=td["observation", "image"], batch_size=[2]),
            state=td["observation", "state"],
            instruction=td["language_instruction"],
            batch_size=[2],
        )
        canonical = TinyVLA(action_dim=2, chunk_size=2)
        pre = TinyVLA(action_dim=2, chunk_size=2, input_mode="preprocessed")
        expected = canonical(td)["vla_action", "chunk"]
        pre.load_state_dict(canonical.state_dict())
        assert pre.in_keys == ["vla_observation"]
        got = pre(TensorDict({"vla_observation": obs}, batch_size=[2]))["vla_action", "chunk"]
        torch.testing.assert_close(got, expected)

    def test_inplace_modes(self):
        td = _obs()
        out = TinyVLA(action_dim=2, chunk_size=2, inplace=False)(td)
        assert out is not td and ("vla_action", "chunk") not in td.keys(True)
        assert set(out.keys()) == {"vla_action"}
        empty = TinyVLA(action_dim=2, chunk_size=2, inplace="empty")(td)
        assert empty is not td and set(empty.keys()) == {"vla_action"}
        target = TensorDict({}, batch_size=[2])
        assert TinyVLA(action_dim=2, chunk_size=2)(td, tensordict_out=target) is target
        assert target["vla_action"].chunk.shape == (2, 2, 2)

    def test_token_log_prob_matches_hand_computation(self):
        policy = _token_policy(return_logits=True)
        out = policy(_obs())
        logits, tokens = out["vla_action", "logits"], out["vla_action", "tokens"]
        assert logits.shape == (2, 2, 3, 16)
        # greedy by default: argmax tokens, summed log-softmax over the chunk
        torch.testing.assert_close(tokens, logits.argmax(-1))
        expected = logits.log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1).sum((-2, -1))
        torch.testing.assert_close(out["vla_action", "log_probs"], expected)
        torch.testing.assert_close(policy.get_dist(_obs()).log_prob(tokens), expected)

    def test_token_mode_sums_to_sequence(self):
        per_token = _token_policy(log_probs_mode="token")
        sequence = _token_policy()
        _materialize(per_token, sequence)
        sequence.load_state_dict(per_token.state_dict())
        out = per_token(_obs())
        assert out["vla_action", "log_probs"].shape == (2, 2, 3)
        torch.testing.assert_close(
            out["vla_action", "log_probs"].sum((-2, -1)),
            sequence.get_dist(_obs()).log_prob(out["vla_action", "tokens"]),
        )

    def test_mask_forbids_tokens(self):
        policy = _token_policy()
        td = _obs()
        mask = torch.zeros(2, 2, 3, 16, dtype=torch.bool)
        mask[..., 5] = True
        td["vla_action", "mask"] = mask
        with set_exploration_type(ExplorationType.RANDOM):
            out = policy(td)
        assert (out["vla_action", "tokens"] == 5).all()
        torch.testing.assert_close(out["vla_action", "log_probs"], torch.zeros(2))

    def test_random_samples_and_deterministic_argmax(self):
        policy = _token_policy(vocab_size=64)
        with set_exploration_type(ExplorationType.RANDOM):
            draws = torch.stack([policy(_obs())["vla_action", "tokens"] for _ in range(4)])
        assert not all(torch.equal(draws[0], d) for d in draws[1:])
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            greedy = policy(_obs())["vla_action", "tokens"]
        torch.testing.assert_close(policy(_obs())["vla_action", "tokens"], greedy)
        sampling = _token_policy(vocab_size=64, mode="sample")
        assert sampling.default_interaction_type == InteractionType.RANDOM

    def test_logits_only(self):
        policy = _token_policy(logits_only=True)
        assert policy.out_keys == [("vla_action", "logits")]
        out = policy(_obs())
        assert out["vla_action", "logits"].shape == (2, 2, 3, 16)
        assert ("vla_action", "tokens") not in out.keys(True, True)
        per_call = _token_policy()(_obs(), logits_only=True)
        assert ("vla_action", "tokens") not in per_call.keys(True, True)

    def test_log_prob_recomputes(self):
        policy = _token_policy()
        tokens = torch.randint(0, 16, (2, 2, 3), generator=torch.Generator().manual_seed(3))
        data = _obs()
        data["vla_action", "tokens"] = tokens
        policy.log_prob(data)
        torch.testing.assert_close(
            data["vla_action", "log_probs"], policy.get_dist(_obs()).log_prob(tokens)
        )

    @pytest.mark.parametrize("inplace", [True, False])
    def test_num_samples(self, inplace):
        policy = _token_policy(num_samples=4, inplace=inplace, return_logits=True)
        td = _obs()
        with set_exploration_type(ExplorationType.RANDOM):
            out = policy(td)
        assert (out is td) == inplace
        assert out.batch_size == ((2,) if inplace else (2, 4))
        tokens = out["vla_action", "tokens"]
        assert tokens.shape == (2, 4, 2, 3)
        assert out["vla_action", "logits"].shape == (2, 4, 2, 3, 16)
        logp = (
            out["vla_action", "logits"].log_softmax(-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
        )
        torch.testing.assert_close(out["vla_action", "log_probs"], logp.sum((-2, -1)))
        data = _obs()
        data["vla_action", "tokens"] = tokens
        torch.testing.assert_close(
            policy.log_prob(data)["vla_action", "log_probs"], logp.sum((-2, -1))
        )

    def test_output_modes_with_tokenizer(self):
        tokenizer = UniformActionTokenizer(16, low=-1.0, high=1.0)
        both = _token_policy(output_mode="both", action_tokenizer=tokenizer)
        out = both(_obs())
        torch.testing.assert_close(
            out["vla_action", "chunk"], tokenizer.decode(out["vla_action", "tokens"])
        )
        chunk_only = _token_policy(output_mode="chunk", action_tokenizer=tokenizer)(_obs())
        assert ("vla_action", "tokens") not in chunk_only.keys(True, True)
        with pytest.raises(RuntimeError, match="no action_tokenizer was provided"):
            _token_policy(output_mode="both")(_obs())
        continuous = TinyVLA(
            action_dim=3, chunk_size=2, output_mode="both", action_tokenizer=tokenizer
        )
        out = continuous(_obs())
        torch.testing.assert_close(
            out["vla_action", "tokens"], tokenizer.encode(out["vla_action", "chunk"])
        )

    def test_continuous_head_has_no_distribution(self):
        policy = TinyVLA(action_dim=3, chunk_size=2)
        with pytest.raises(RuntimeError, match="only defined for the 'tokens' action head"):
            policy.get_dist(_obs())
        with pytest.raises(RuntimeError, match="only defined for the 'tokens' action head"):
            policy.log_prob(_obs())

    def test_get_new_version_shares_weights(self):
        policy = TinyVLA(action_dim=3, chunk_size=2)
        other = policy.get_new_version(inplace=False, action_chunk_key=("pred", "a"))
        assert other.inplace is False and policy.inplace is True
        assert other.out_keys == [("pred", "a")] and policy.out_keys == [("vla_action", "chunk")]
        assert other.head is policy.head
        with pytest.raises(TypeError, match="TinyVLA has no parameter 'bogus'"):
            policy.get_new_version(bogus=1)

    def test_multistep_actor_plays_the_chunk(self):
        policy = TinyVLA(action_dim=3, chunk_size=2)
        actor = MultiStepActorWrapper(policy, n_steps=2)
        td = _obs()
        td["is_init"] = torch.ones(2, 1, dtype=torch.bool)
        out = actor(td)
        torch.testing.assert_close(out["action"], out["vla_action", "chunk"][:, 0])

    def test_gradients_reach_the_encoders(self):
        policy = TinyVLA(action_dim=3, chunk_size=2)
        policy(_obs())["vla_action", "chunk"].sum().backward()
        assert policy.image_encoder[1].weight.grad.abs().sum() > 0
        assert policy.state_encoder[0].weight.grad.abs().sum() > 0


def _materialize(*policies):
    """Run each policy once so its lazy layers have shapes (state dicts then load)."""
    for policy in policies:
        policy(_obs())


class _ChunkPolicy:
    def __init__(self, chunk_size, action_dim):
        self.shape = (chunk_size, action_dim)
        self.batch = None

    def predict_action_chunk(self, batch):
        self.batch = batch
        return torch.arange(batch["observation.state"].shape[0] * 6, dtype=torch.float).reshape(
            -1, *self.shape
        )


class TestLeRobotPolicyWrapper:
    def test_batch_and_chunk(self):
        inner = _ChunkPolicy(2, 3)
        policy = LeRobotPolicyWrapper(inner, action_dim=3, chunk_size=2, camera_name="top")
        td = _obs()
        out = policy(td)
        assert set(inner.batch) == {"observation.images.top", "observation.state", "task"}
        assert inner.batch["task"] == ["task 0", "task 1"]
        torch.testing.assert_close(out["vla_action", "chunk"], torch.arange(12.0).reshape(2, 2, 3))

    def test_predict_fn_and_callables(self):
        def predict_fn(model, batch):
            return torch.ones(batch["observation.state"].shape[0], 2, 3)

        out = LeRobotPolicyWrapper(object(), action_dim=3, chunk_size=2, predict_fn=predict_fn)(
            _obs()
        )
        torch.testing.assert_close(out["vla_action", "chunk"], torch.ones(2, 2, 3))
        out = LeRobotPolicyWrapper(lambda batch: torch.zeros(2, 2, 3), action_dim=3, chunk_size=2)(
            _obs()
        )
        torch.testing.assert_close(out["vla_action", "chunk"], torch.zeros(2, 2, 3))

    def test_errors(self):
        with pytest.raises(TypeError, match="no 'predict_action_chunk' or 'forward' method"):
            LeRobotPolicyWrapper(object(), action_dim=3, chunk_size=2)(_obs())
        single_step = LeRobotPolicyWrapper(
            lambda batch: torch.zeros(2, 3), action_dim=3, chunk_size=2
        )
        with pytest.raises(ValueError, match=r"action chunk of shape \[..., 2, 3\], got \(2, 3\)"):
            single_step(_obs())

    def test_from_pretrained_needs_lerobot(self):
        if importlib.util.find_spec("lerobot") is not None:
            pytest.skip("lerobot is installed")
        with pytest.raises(ImportError, match="lerobot"):
            LeRobotPolicyWrapper.from_pretrained("fake/repo", action_dim=7, chunk_size=4)

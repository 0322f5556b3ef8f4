"""rl.core.vla: action tokenizers, robot dataset metadata and the VLA key layout.

Expected values are TorchRL 0.14.1's (``torchrl.data.vla``) on the same inputs.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import NonTensorData, TensorDict

from rl.core import Bounded, Unbounded
from rl.core.vla import (
    ACTION_TOKENS_KEY,
    RobotDatasetMetadata,
    UniformActionTokenizer,
    VocabTailActionTokenizer,
    validate_vla_tensordict,
)


class TestUniformActionTokenizer:
    def test_encode_decode_values(self):
        tok = UniformActionTokenizer(256, low=-1.0, high=1.0)
        tokens = tok.encode(torch.tensor([-1.0, 0.0, 1.0, 5.0, -5.0]))
        assert tokens.tolist() == [0, 128, 255, 255, 0]
        assert tokens.dtype == torch.long
        # bin centres: low + (k + 0.5) / n * (high - low)
        torch.testing.assert_close(
            tok.decode(torch.tensor([0, 128])), torch.tensor([-1 + 1 / 256, 1 / 256])
        )
        assert tok.vocab_size == 256 and tok.action_dim is None

    def test_round_trip_within_half_a_bin(self):
        tok = UniformActionTokenizer(
            16, low=torch.tensor([-2.0, 0.0]), high=torch.tensor([2.0, 1.0])
        )
        a = torch.stack([torch.linspace(-2, 2, 50), torch.linspace(0, 1, 50)], -1)
        err = (tok.decode(tok.encode(a)) - a).abs()
        assert (err <= torch.tensor([4 / 32, 1 / 32]) + 1e-6).all()
        assert tok.action_dim == 2

    def test_action_dim_repeats_scalar_bounds(self):
        tok = UniformActionTokenizer(4, low=-1.0, high=1.0, action_dim=3)
        assert tok.low.shape == (3,)

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"num_bins": 0, "low": 0.0, "high": 1.0}, "num_bins must be >= 1, got 0"),
            ({"num_bins": 4, "low": torch.zeros(2), "high": torch.ones(3)}, "same shape"),
            ({"num_bins": 4, "low": 1.0, "high": 1.0}, "high must be above low"),
        ],
    )
    def test_bad_arguments(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            UniformActionTokenizer(kwargs.pop("num_bins"), **kwargs)

    def test_from_metadata(self):
        meta = RobotDatasetMetadata(
            "d", action_dim=2, action_low=[-1.0, 0.0], action_high=[1.0, 2.0]
        )
        tok = UniformActionTokenizer.from_metadata(meta, 8)
        assert tok.encode(torch.tensor([0.0, 2.0])).tolist() == [4, 7]
        with pytest.raises(ValueError, match="'d' has no action bounds"):
            UniformActionTokenizer.from_metadata(RobotDatasetMetadata("d"), 8)


class TestVocabTailActionTokenizer:
    def test_window_and_full_ids(self):
        tok = VocabTailActionTokenizer(256)
        assert tok.encode(torch.tensor([-1.0, 0.0, 1.0])).tolist() == [255, 128, 0]
        torch.testing.assert_close(
            tok.decode(torch.tensor([255, 128, 0])), torch.tensor([-0.996078, 0.0, 0.996078])
        )
        full = VocabTailActionTokenizer(256, full_vocab_size=32000)
        assert full.encode(torch.tensor([-1.0, 0.0, 1.0])).tolist() == [31999, 31872, 31744]
        assert full.vocab_size == 32000 and tok.vocab_size == 256

    def test_norm_stats_and_gripper(self):
        # TorchRL 0.14.1 on the same input: tokens [[2, 3], [7, 5]], decoded
        # [[1.1429, -1.0], [-1.7143, 1.0]]
        tok = VocabTailActionTokenizer(
            8,
            norm_low=torch.tensor([-2.0, 0.0]),
            norm_high=torch.tensor([2.0, 1.0]),
            norm_mask=torch.tensor([True, False]),
            gripper_binarize=True,
            gripper_invert=True,
        )
        tokens = tok.encode(torch.tensor([[1.3, 0.4], [-1.9, -0.2]]))
        assert tokens.tolist() == [[2, 3], [7, 5]]
        out = tok.decode(tokens)
        assert out.dtype == torch.float32
        torch.testing.assert_close(
            out, torch.tensor([[8 / 7, -1.0], [-12 / 7, 1.0]]), atol=1e-4, rtol=0
        )

    def test_from_norm_stats(self):
        stats = {
            "libero": {"action": {"q01": [-1.0, 0.0], "q99": [1.0, 1.0], "mask": [True, False]}}
        }
        tok = VocabTailActionTokenizer.from_norm_stats(stats, "libero", num_bins=8)
        assert tok.norm_mask.tolist() == [True, False]
        with pytest.raises(KeyError, match="unnorm_key 'bridge' is not in norm_stats"):
            VocabTailActionTokenizer.from_norm_stats(stats, "bridge")

    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="num_bins must be >= 2"):
            VocabTailActionTokenizer(1)
        with pytest.raises(ValueError, match="full_vocab_size \\(4\\) must be at least num_bins"):
            VocabTailActionTokenizer(8, full_vocab_size=4)
        with pytest.raises(ValueError, match="given together"):
            VocabTailActionTokenizer(8, norm_low=torch.zeros(2))


class TestRobotDatasetMetadata:
    def test_spec_and_json_round_trip(self, tmp_path):
        meta = RobotDatasetMetadata(
            "bridge",
            action_dim=2,
            action_low=[-1.0, -2.0],
            action_high=[1.0, 2.0],
            camera_keys=[["obs", "cam"]],
        )
        spec = meta.make_action_spec(shape_prefix=(3,))
        assert isinstance(spec, Bounded) and spec.shape == (3, 2)
        assert spec.space.high[0].tolist() == [1.0, 2.0]
        assert meta.camera_keys == (("obs", "cam"),)
        back = RobotDatasetMetadata.from_json(meta.to_json(str(tmp_path / "m.json")))
        assert bool((back == meta).all())
        assert RobotDatasetMetadata.from_json(str(tmp_path / "m.json")).dataset_id == "bridge"
        assert isinstance(RobotDatasetMetadata("b", action_dim=3).make_action_spec(), Unbounded)

    @pytest.mark.parametrize(
        ("kwargs", "match"),
        [
            ({"action_space": "cartesian"}, "action_space must be one of"),
            ({"gripper_mode": "open"}, "gripper_mode must be one of"),
            ({"action_dim": 0}, "action_dim must be a positive int, got 0"),
        ],
    )
    def test_bad_fields(self, kwargs, match):
        with pytest.raises(ValueError, match=match):
            RobotDatasetMetadata("d", **kwargs)
        with pytest.raises(ValueError, match="has no action_dim"):
            RobotDatasetMetadata("d").make_action_spec()


class TestValidate:
    def test_issues(self):
        td = TensorDict({"action": torch.tensor([[0.0, float("nan")]])}, [1])
        issues = validate_vla_tensordict(td, raise_on_error=False)
        assert len(issues) == 3
        with pytest.raises(ValueError, match="missing language instruction"):
            validate_vla_tensordict(td)
        td["language_instruction"] = NonTensorData("pick", batch_size=[1])
        td["observation", "state"] = torch.zeros(1, 3)
        td["action"] = torch.zeros(1, 2)
        assert validate_vla_tensordict(td) == []
        assert ACTION_TOKENS_KEY == ("vla_action", "tokens")

"""Python LSTM/GRU layers (torch.nn's arguments, proj_size, scan), the per-thread recurrent
mode, keyword calls of the recurrent modules and get_env_transforms_from_module."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

from rl.modules import (
    GRU,
    LSTM,
    MLP,
    GRUModule,
    LSTMModule,
    get_env_transforms_from_module,
    recurrent_mode,
    set_recurrent_mode,
)


@pytest.mark.parametrize("use_scan", [False, True])
@pytest.mark.parametrize("batch_first", [True, False])
class TestPythonLayers:
    def test_lstm_matches_torch(self, use_scan, batch_first):
        torch.manual_seed(0)
        kwargs = dict(num_layers=2, proj_size=2, batch_first=batch_first, bias=False)
        lstm = LSTM(3, 5, use_scan=use_scan, **kwargs)
        ref = nn.LSTM(3, 5, **kwargs)
        ref.load_state_dict(lstm.state_dict())
        x = torch.randn(4, 6, 3)
        hx = (
            torch.randn(2, 6 if not batch_first else 4, 2),
            torch.randn(2, 6 if not batch_first else 4, 5),
        )
        out, (h, c) = lstm(x, hx)
        ref_out, (ref_h, ref_c) = ref(x, hx)
        assert h.shape[-1] == 2 and c.shape[-1] == 5
        torch.testing.assert_close(out, ref_out)
        torch.testing.assert_close(h, ref_h)
        torch.testing.assert_close(c, ref_c)

    def test_gru_matches_torch(self, use_scan, batch_first):
        torch.manual_seed(0)
        gru = GRU(
            3, 5, num_layers=2, batch_first=batch_first, use_scan=use_scan, dtype=torch.float64
        )
        ref = nn.GRU(3, 5, num_layers=2, batch_first=batch_first, dtype=torch.float64)
        ref.load_state_dict(gru.state_dict())
        x = torch.randn(4, 6, 3, dtype=torch.float64)
        torch.testing.assert_close(gru(x)[0], ref(x)[0])
        torch.testing.assert_close(gru(x)[1], ref(x)[1])

    def test_mask_freezes_the_state(self, use_scan, batch_first):
        torch.manual_seed(0)
        gru = GRU(2, 3, batch_first=batch_first, use_scan=use_scan)
        x = torch.randn(2, 4, 2) if batch_first else torch.randn(4, 2, 2)
        mask = torch.tensor([[True, True, False, False], [True, True, True, True]])
        if not batch_first:
            mask = mask.T
        _, h = gru(x, mask=mask)
        first_two = x[:1, :2] if batch_first else x[:2, :1]
        _, h_ref = gru(first_two)
        torch.testing.assert_close(h[:, 0], h_ref[:, 0])


class TestPythonLayerArguments:
    def test_torch_arguments_by_name(self):
        lstm = LSTM(
            input_size=3,
            hidden_size=4,
            num_layers=2,
            batch_first=False,
            bias=False,
            dropout=0.5,
            proj_size=2,
        )
        assert (lstm.batch_first, lstm.bias, lstm.dropout, lstm.proj_size) == (False, False, 0.5, 2)
        gru = GRU(input_size=3, hidden_size=4, dtype=torch.float64)
        assert gru.weight_ih_l0.dtype == torch.float64 and gru.batch_first

    @pytest.mark.parametrize("cls", [LSTM, GRU])
    def test_errors(self, cls):
        with pytest.raises(ValueError, match="does not support bidirectional=True"):
            cls(3, 4, bidirectional=True)
        with pytest.raises(ValueError, match="expects a 3-D input, got 2-D"):
            cls(3, 4)(torch.zeros(2, 3))

    def test_dropout_only_in_training(self):
        torch.manual_seed(0)
        lstm = LSTM(3, 4, num_layers=2, dropout=0.9).eval()
        x = torch.randn(2, 5, 3)
        torch.testing.assert_close(lstm(x)[0], lstm(x)[0])
        lstm.train()
        assert not torch.allclose(lstm(x)[0], lstm.eval()(x)[0])


class TestRecurrentModeAndCalls:
    def test_mode_is_per_thread(self):
        seen = []
        with set_recurrent_mode(True):
            thread = threading.Thread(target=lambda: seen.append(recurrent_mode()))
            thread.start()
            thread.join()
            assert recurrent_mode() is True
        assert seen == [None]
        assert recurrent_mode() is None

    def test_keyword_call_infers_the_batch(self):
        torch.manual_seed(0)
        module = GRUModule(
            input_size=3,
            hidden_size=4,
            num_layers=2,
            in_keys=["obs", "h"],
            out_keys=["y", ("next", "h")],
        )
        obs, h = torch.randn(5, 6, 3), torch.randn(5, 6, 2, 4)
        y, h_next = module(obs=obs, h=h, is_init=torch.zeros(5, 6, dtype=torch.bool))
        # step by step: each of the 30 elements is one step from its own state
        ref_y, ref_h = module.gru(
            obs.reshape(30, 1, 3), h.reshape(30, 2, 4).transpose(0, 1).contiguous()
        )
        torch.testing.assert_close(y, ref_y.reshape(5, 6, 4))
        torch.testing.assert_close(h_next, ref_h.transpose(0, 1).reshape(5, 6, 2, 4))

    @pytest.mark.parametrize("cls, keys", [(LSTMModule, ["x", "h", "c"]), (GRUModule, ["x", "h"])])
    def test_string_keys_refused(self, cls, keys):
        out_keys = ["y", *[("next", k) for k in keys[1:]]]
        with pytest.raises(TypeError, match="incompatible function arguments"):
            cls(input_size=3, hidden_size=4, in_keys="abc", out_keys=out_keys)
        with pytest.raises(TypeError, match="incompatible function arguments"):
            cls(input_size=3, hidden_size=4, in_keys=keys, out_keys="abc")


class TestEnvTransformsFromModule:
    def test_recurrent_module(self):
        pytest.importorskip("rl.envs")
        from rl.envs import Compose, InitTracker, TensorDictPrimer

        lstm = LSTMModule(
            input_size=3,
            hidden_size=4,
            in_keys=["x", "h", "c"],
            out_keys=["y", ("next", "h"), ("next", "c")],
        )
        transforms = get_env_transforms_from_module(lstm)
        assert isinstance(transforms, Compose)
        tracker, primer = list(transforms)
        assert isinstance(tracker, InitTracker) and tracker.init_key == "is_init"
        assert isinstance(primer, TensorDictPrimer)
        assert set(primer.primers.keys()) == {"h", "c"}
        assert primer.primers["h"].shape == (1, 4)

    def test_plain_module_gets_a_tracker_only(self):
        pytest.importorskip("rl.envs")
        from rl.envs import InitTracker

        tracker = get_env_transforms_from_module(
            MLP(in_features=2, out_features=2), init_key="my_init"
        )
        assert isinstance(tracker, InitTracker)
        assert tracker.init_key == "my_init"


class TestRecurrentMatmulPrecision:
    @pytest.fixture(autouse=True)
    def _restore(self):
        from rl.modules import set_recurrent_matmul_precision

        prev = torch.get_float32_matmul_precision()
        yield
        torch.set_float32_matmul_precision(prev)
        set_recurrent_matmul_precision(None)

    def _gpu(self, monkeypatch, major):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (major, 0))
        monkeypatch.setattr(torch.version, "hip", None)

    def test_set_get_and_presets(self, monkeypatch):
        from rl.modules import get_recurrent_matmul_precision, set_recurrent_matmul_precision

        for mode in ("ieee", "tf32", "tf32x3"):
            set_recurrent_matmul_precision(mode)
            assert get_recurrent_matmul_precision() == mode
        self._gpu(monkeypatch, 9)
        set_recurrent_matmul_precision("fast")
        assert get_recurrent_matmul_precision() == "tf32"
        set_recurrent_matmul_precision("high-prec")
        assert get_recurrent_matmul_precision() == "tf32x3"
        self._gpu(monkeypatch, 7)  # no TF32 tensor cores
        assert get_recurrent_matmul_precision() == "ieee"

    @pytest.mark.parametrize(
        "torch_mode, ampere, volta",
        [("highest", "ieee", "ieee"), ("high", "tf32x3", "ieee"), ("medium", "tf32", "ieee")],
    )
    def test_auto_follows_torch(self, monkeypatch, torch_mode, ampere, volta):
        from rl.modules import get_recurrent_matmul_precision, set_recurrent_matmul_precision

        monkeypatch.delenv("RL_RNN_PRECISION", raising=False)
        monkeypatch.delenv("TORCHRL_RNN_PRECISION", raising=False)
        set_recurrent_matmul_precision("auto")
        torch.set_float32_matmul_precision(torch_mode)
        self._gpu(monkeypatch, 8)
        assert get_recurrent_matmul_precision() == ampere
        self._gpu(monkeypatch, 7)
        assert get_recurrent_matmul_precision() == volta

    def test_env_var_and_errors(self, monkeypatch):
        from rl.modules import get_recurrent_matmul_precision, set_recurrent_matmul_precision

        monkeypatch.setenv("TORCHRL_RNN_PRECISION", "tf32x3")
        set_recurrent_matmul_precision(None)
        assert get_recurrent_matmul_precision() == "tf32x3"
        monkeypatch.setenv("RL_RNN_PRECISION", "fp16")
        with pytest.raises(
            ValueError, match="RL_RNN_PRECISION='fp16' is not a valid recurrent matmul precision"
        ):
            set_recurrent_matmul_precision(None)
        with pytest.raises(ValueError, match="Invalid recurrent matmul precision 'fp16'"):
            set_recurrent_matmul_precision("fp16")
        with pytest.raises(ValueError, match="recurrent_matmul_precision"):
            GRUModule(
                input_size=3,
                hidden_size=4,
                in_key="x",
                out_key="y",
                recurrent_matmul_precision="fp16",
            )

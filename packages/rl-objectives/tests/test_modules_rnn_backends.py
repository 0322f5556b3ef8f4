"""LSTMModule / GRUModule recurrent backends: "scan" (a step loop with resets) against
"pad", gradients and recomputation, option errors, canonicalize."""

import pytest
import torch
from tensordict import TensorDict

from rl.modules import GRUModule, LSTMModule, canonicalize_rnn_subset, set_recurrent_mode


def _module(cls, backend, **kwargs):
    torch.manual_seed(0)
    return cls(
        input_size=3,
        hidden_size=5,
        num_layers=2,
        in_key="obs",
        out_key="feat",
        recurrent_backend=backend,
        **kwargs,
    )


def _data(cls):
    torch.manual_seed(1)
    n, t = 3, 7
    is_init = torch.zeros(n, t, 1, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[0, 3] = is_init[1, 2] = is_init[1, 5] = True
    states = (
        {"recurrent_state": 2}
        if cls is GRUModule
        else {"recurrent_state_h": 2, "recurrent_state_c": 2}
    )
    td = TensorDict({"obs": torch.randn(n, t, 3), "is_init": is_init}, [n, t])
    for key in states:
        td[key] = torch.randn(n, t, 2, 5)
    return td


def _run(module, td):
    with set_recurrent_mode(True):
        return module(td.clone())


@pytest.mark.parametrize("cls", [LSTMModule, GRUModule])
@pytest.mark.parametrize("python_based", [False, True])
def test_scan_equals_pad_outputs_and_next_states(cls, python_based):
    pad = _module(cls, "pad", python_based=python_based)
    scan = _module(cls, "scan", python_based=python_based)
    scan.load_state_dict(pad.state_dict())
    td = _data(cls)
    a, b = _run(pad, td), _run(scan, td)
    torch.testing.assert_close(a["feat"], b["feat"])
    for key in a["next"].keys():
        torch.testing.assert_close(a["next", key], b["next", key])
    # a step-by-step rollout gives the same features: the stored state where a
    # trajectory starts (zero at is_init, as the module zeroes it), else the carried one
    step = _module(cls, "pad", python_based=python_based)
    step.load_state_dict(pad.state_dict())
    keys = [k for k in td.keys() if str(k).startswith("recurrent")]
    for i in range(td.shape[0]):
        carried = None
        for t in range(td.shape[1]):
            row = td[i, t].clone()
            if carried is not None and not row["is_init"].any():
                for k in keys:
                    row[k] = carried[k]
            out = step(row)
            carried = {k: out["next", k] for k in keys}
            torch.testing.assert_close(out["feat"], b["feat"][i, t])


@pytest.mark.parametrize("cls", [LSTMModule, GRUModule])
def test_scan_gradients_and_full_recompute_match_pad(cls):
    td = _data(cls)
    grads = []
    for backend, recompute in [("pad", "none"), ("scan", "none"), ("scan", "full")]:
        module = _module(cls, backend, recurrent_recompute=recompute)
        _run(module, td)["feat"].pow(2).sum().backward()
        grads.append([p.grad.clone() for p in module.parameters()])
    for other in grads[1:]:
        for g, h in zip(grads[0], other):
            torch.testing.assert_close(g, h)


def test_scan_compute_dtype_runs_in_bfloat16():
    module = _module(LSTMModule, "scan", recurrent_compute_dtype=torch.bfloat16)
    ref = _module(LSTMModule, "scan")
    td = _data(LSTMModule)
    out, want = _run(module, td)["feat"], _run(ref, td)["feat"]
    assert out.dtype is torch.float32
    assert not torch.equal(out, want)  # bfloat16 maths, close to float32's
    torch.testing.assert_close(out, want, atol=0.05, rtol=0.05)


def test_scan_compute_dtype_without_onednn_kernels(monkeypatch):
    """A CPU without oneDNN's bfloat16 kernels (no AVX-512 BF16, as AMD's EPYC here):
    ATen's kernels compute in bfloat16, and oneDNN is turned back on afterwards."""
    from rl.modules.tensordict_module import _rnn

    monkeypatch.setattr(_rnn, "_onednn_computes", lambda dtype: False)
    module = _module(LSTMModule, "scan", recurrent_compute_dtype=torch.bfloat16)
    ref = _module(LSTMModule, "scan")
    td = _data(LSTMModule)
    out, want = _run(module, td)["feat"], _run(ref, td)["feat"]
    assert not torch.equal(out, want)
    torch.testing.assert_close(out, want, atol=0.05, rtol=0.05)
    assert torch.backends.mkldnn.enabled is True


@pytest.mark.parametrize("cls", [LSTMModule, GRUModule])
def test_option_errors(cls):
    kw = dict(input_size=3, hidden_size=4, in_key="obs", out_key="out")
    with pytest.raises(ValueError, match="recurrent_backend must be one of"):
        cls(**kw, recurrent_backend="other")
    with pytest.raises(RuntimeError, match="triton"):
        cls(**kw, recurrent_backend="triton")
    for backend in ("auto", "pad"):
        with pytest.raises(ValueError, match="recurrent_recompute is only supported"):
            cls(**kw, recurrent_backend=backend, recurrent_recompute="full")
    with pytest.raises(ValueError, match="recurrent_recompute must be one of"):
        cls(**kw, recurrent_backend="scan", recurrent_recompute="partial")
    with pytest.raises(ValueError, match="recurrent_matmul_precision"):
        cls(**kw, recurrent_matmul_precision="half")
    assert cls(**kw, recurrent_matmul_precision="ieee").recurrent_matmul_precision == "ieee"


def test_canonicalize_touches_only_the_module_keys():
    lstm = LSTMModule(input_size=3, hidden_size=4, in_key="obs", out_key="a")
    gru = GRUModule(input_size=3, hidden_size=4, in_key="obs", out_key="b")
    obs = torch.randn(5, 2, 3).transpose(0, 1)  # not contiguous
    reward = torch.randn(5, 2, 1).transpose(0, 1)
    td = TensorDict({"obs": obs, "reward": reward}, [2, 5])
    out = lstm.canonicalize(td)
    assert out is not td and out["obs"].is_contiguous()
    torch.testing.assert_close(out["obs"], obs)
    assert out["reward"].data_ptr() == reward.data_ptr() and not td["obs"].is_contiguous()
    assert lstm.canonicalize(td, inplace=True) is td and td["obs"].is_contiguous()
    # a size-1 dim with an odd stride passes is_contiguous() but is made row-major
    odd = torch.empty_strided((1, 4, 3), (3, 3, 1)).copy_(torch.randn(1, 4, 3))
    td2 = TensorDict({"obs": odd}, [1, 4])
    out2 = canonicalize_rnn_subset(td2, [lstm, gru])
    assert out2["obs"].stride() == (12, 3, 1)
    assert set(lstm.canonical_keys) == {*lstm.in_keys, *lstm.out_keys}

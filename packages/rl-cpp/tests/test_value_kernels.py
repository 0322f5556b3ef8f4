"""rl.cpp's GAE and TD(lambda) kernels against plain numpy loops; input checks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl.cpp import generalized_advantage_estimate, td_lambda_return_estimate


def loop_gae(gamma, lmbda, v, nv, r, done, term):
    adv = np.zeros_like(v)
    running = np.zeros_like(v[:, 0])
    for t in reversed(range(v.shape[1])):
        delta = r[:, t] + gamma * (1 - term[:, t]) * nv[:, t] - v[:, t]
        running = delta + gamma * lmbda * (1 - done[:, t]) * running
        adv[:, t] = running
    return adv, adv + v


def loop_td_lambda(gamma, lmbda, nv, r, done, term):
    out = np.zeros_like(nv)
    n = nv.shape[1]
    g = None
    for t in reversed(range(n)):
        boot = (1 - term[:, t]) * nv[:, t]
        g = boot if t == n - 1 else np.where(done[:, t], boot, g)
        g = r[:, t] + gamma * ((1 - lmbda) * boot + lmbda * g)
        out[:, t] = g
    return out


def data(shape=(5, 40, 3), dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    v, nv, r = (rng.standard_normal(shape).astype(dtype) for _ in range(3))
    done = rng.random(shape) < 0.1
    term = done & (rng.random(shape) < 0.5)
    return v, nv, r, done, term


class TestGAE:
    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    @pytest.mark.parametrize("shape", [(1, 1, 1), (5, 40, 3), (3, 17, 1), (4, 9, 2)])
    def test_numpy_matches_loop(self, dtype, shape):
        v, nv, r, done, term = data(shape, dtype)
        adv, target = generalized_advantage_estimate(0.9, 0.8, v, nv, r, done, term)
        ref_adv, ref_target = loop_gae(0.9, 0.8, v, nv, r, done, term)
        assert adv.dtype == dtype and isinstance(adv, np.ndarray)
        np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(target, ref_target, rtol=1e-5, atol=1e-5)

    def test_torch_strided_views_in_place(self):
        # time-major [T, N, F] tensors read through transposed (non-contiguous) views
        v, nv, r, done, term = (
            torch.from_numpy(np.ascontiguousarray(a.transpose(1, 0, 2))) for a in data()
        )
        views = [a.transpose(0, 1) for a in (v, nv, r, done, term)]
        assert not views[0].is_contiguous()
        adv = torch.empty(views[0].shape)
        target = torch.empty(views[0].shape).transpose(0, 2).contiguous().transpose(0, 2)
        out = generalized_advantage_estimate(0.9, 0.8, *views, adv, target)
        assert out[0] is adv and out[1] is target
        ref_adv, ref_target = loop_gae(0.9, 0.8, *(a.numpy() for a in views))
        np.testing.assert_allclose(adv.numpy(), ref_adv, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(target.numpy(), ref_target, rtol=1e-5, atol=1e-5)

    def test_expanded_flags(self):
        v, nv, r, _, _ = data((4, 10, 1))
        done = torch.zeros(1, 10, 1, dtype=torch.bool)
        done[0, 4] = True
        done = done.expand(4, 10, 1)  # stride 0 over N
        adv, _ = generalized_advantage_estimate(
            0.9, 0.8, *map(torch.from_numpy, (v, nv, r)), done, done
        )
        ref, _ = loop_gae(0.9, 0.8, v, nv, r, done.numpy(), done.numpy())
        np.testing.assert_allclose(adv.numpy(), ref, rtol=1e-5, atol=1e-5)


class TestTDLambda:
    @pytest.mark.parametrize("lmbda", [0.0, 0.7, 1.0])
    @pytest.mark.parametrize("dtype", [np.float32, np.float64])
    def test_matches_loop(self, lmbda, dtype):
        _, nv, r, done, term = data((5, 40, 3), dtype, seed=1)
        out = td_lambda_return_estimate(0.9, lmbda, nv, r, done, term)
        np.testing.assert_allclose(
            out, loop_td_lambda(0.9, lmbda, nv, r, done, term), rtol=1e-5, atol=1e-5
        )

    def test_writes_into_out(self):
        _, nv, r, done, term = data()
        out = np.empty_like(nv)
        assert td_lambda_return_estimate(0.9, 0.5, nv, r, done, term, out) is out


class TestErrors:
    def test_mixed_float_dtypes(self):
        v, nv, r, done, term = data()
        with pytest.raises(TypeError, match="next_state_value has dtype float64, expected float32"):
            generalized_advantage_estimate(0.9, 0.9, v, nv.astype(np.float64), r, done, term)

    def test_integer_values(self):
        v, nv, r, done, term = data()
        with pytest.raises(TypeError, match="state_value has dtype int64"):
            generalized_advantage_estimate(
                0.9, 0.9, v.astype(np.int64), nv, r, done, term, np.empty_like(v), np.empty_like(v)
            )

    def test_flags_must_be_bool(self):
        v, nv, r, done, term = data()
        with pytest.raises(TypeError, match="done has dtype uint8, expected bool"):
            generalized_advantage_estimate(0.9, 0.9, v, nv, r, done.astype(np.uint8), term)

    def test_shapes(self):
        v, nv, r, done, term = data()
        with pytest.raises(ValueError, match=r"reward has shape \(5, 39, 3\)"):
            generalized_advantage_estimate(0.9, 0.9, v, nv, r[:, 1:], done, term)

    def test_three_dimensions(self):
        v, nv, r, done, term = (a[0] for a in data())
        with pytest.raises(ValueError, match=r"\[N, T, F\] \(3 dimensions\), got shape \(40, 3\)"):
            td_lambda_return_estimate(0.9, 0.9, nv, r, done, term)

    def test_not_an_array(self):
        v, nv, r, done, term = data()
        with pytest.raises(
            TypeError, match="reward must be a numpy array or a torch tensor, got list"
        ):
            td_lambda_return_estimate(0.9, 0.9, nv, r.tolist(), done, term, np.empty_like(nv))

    def test_low_level_rejects_read_only_output(self):
        from rl.cpp import _C

        v, nv, r, done, term = data()
        out = np.empty_like(v)
        out.setflags(write=False)
        with pytest.raises(TypeError, match="incompatible function arguments"):
            _C.td_lambda_return(0.9, 0.9, nv, r, done, term, out)

    @pytest.mark.gpu
    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    def test_cuda_tensors_are_rejected(self):
        v, nv, r, done, term = (torch.from_numpy(a).cuda() for a in data())
        with pytest.raises(
            ValueError, match="is on cuda:0; the compiled kernels run on CPU arrays only"
        ):
            generalized_advantage_estimate(0.9, 0.9, v, nv, r, done, term)

"""rl.objectives.value.functional against plain per-step Python loops."""

from __future__ import annotations

import pytest
import torch

from rl.objectives.value import _scan
from rl.objectives.value import functional as F

GAMMA, LMBDA = 0.9, 0.7
SHAPES = [(12, 1), (3, 12, 1), (2, 12, 3)]
GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


# ------------------------------------------------------------------ plain references
def _steps(x):
    return x.shape[-2]


def _at(x, t):
    return x[..., t, :] if isinstance(x, torch.Tensor) and x.ndim else x


def loop_gae(gamma, lmbda, v, nv, r, done, term):
    adv = torch.zeros_like(v)
    running = torch.zeros_like(v[..., 0, :])
    for t in reversed(range(_steps(v))):
        g = _at(gamma, t)
        delta = r[..., t, :] + g * (~term[..., t, :]) * nv[..., t, :] - v[..., t, :]
        running = delta + g * lmbda * (~done[..., t, :]) * running
        adv[..., t, :] = running
    return adv, adv + v


def loop_td_lambda(gamma, lmbda, nv, r, done, term):
    ret = torch.zeros_like(nv)
    n = _steps(nv)
    g = None
    for t in reversed(range(n)):
        boot = (~term[..., t, :]) * nv[..., t, :]
        if t == n - 1:
            g = boot
        g = torch.where(done[..., t, :], boot, g)
        g = r[..., t, :] + gamma * ((1 - lmbda) * boot + lmbda * g)
        ret[..., t, :] = g
    return ret


def loop_td1(gamma, nv, r, done, term):
    ret = torch.zeros_like(nv)
    n = _steps(nv)
    g = torch.zeros_like(nv[..., 0, :])
    for t in reversed(range(n)):
        if t == n - 1:
            tail = nv[..., t, :]
        else:
            tail = torch.where(done[..., t, :], nv[..., t, :], g)
        g = r[..., t, :] + gamma * (~term[..., t, :]) * tail
        ret[..., t, :] = g
    return ret


def loop_vtrace(gamma, log_pi, log_mu, v, nv, r, done, term, rho_thresh=1.0, c_thresh=1.0):
    n = _steps(v)
    rho = (log_pi - log_mu).exp()
    vs = torch.zeros_like(v)
    acc = torch.zeros_like(v[..., 0, :])
    for t in reversed(range(n)):
        rho_t = rho[..., t, :].clamp_max(rho_thresh)
        c_t = rho[..., t, :].clamp_max(c_thresh)
        delta = rho_t * (r[..., t, :] + gamma * (~term[..., t, :]) * nv[..., t, :] - v[..., t, :])
        acc = delta + gamma * (~done[..., t, :]) * c_t * acc
        vs[..., t, :] = acc + v[..., t, :]
    adv = torch.zeros_like(v)
    for t in range(n):
        nxt = (
            nv[..., t, :]
            if t == n - 1
            else torch.where(done[..., t, :], nv[..., t, :], vs[..., t + 1, :])
        )
        rho_t = rho[..., t, :].clamp_max(rho_thresh)
        adv[..., t, :] = rho_t * (r[..., t, :] + gamma * (~term[..., t, :]) * nxt - v[..., t, :])
    return adv, vs


def loop_reward2go(gamma, r, done):
    out = torch.zeros_like(r)
    acc = torch.zeros_like(r[..., 0, :])
    for t in reversed(range(_steps(r))):
        acc = r[..., t, :] + gamma * (~done[..., t, :]) * acc
        out[..., t, :] = acc
    return out


# ------------------------------------------------------------------ fixtures
@pytest.fixture(params=["cpp", "torch"])
def backend(request, monkeypatch):
    if request.param == "cpp":
        if _scan.cpp_kernels() is None:
            pytest.skip("rl-cpp is not installed")
    else:
        monkeypatch.setattr(_scan, "_cpp", False)
    return request.param


def make_data(shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    v, nv, r, lp, lm = torch.randn(5, *shape, generator=g, dtype=dtype).unbind(0)
    done = torch.rand(shape, generator=g) < 0.2
    done[..., 3, :] = True  # an episode end in the middle, in every row
    term = done & (torch.rand(shape, generator=g) < 0.5)
    term[..., 3, :] = True  # terminated ...
    done[..., 7, :] = True  # ... and truncated ends in the middle
    term[..., 7, :] = False
    return dict(v=v, nv=nv, r=r, done=done, term=term, log_pi=lp, log_mu=lm * 0.5)


def alt_time(x, shape):
    """The same data with time moved to dimension 0 (1-D for [T, 1])."""
    if len(shape) == 2:
        return x.squeeze(-1), -1
    return x.movedim(-2, 0), 0


def back_time(x, shape):
    if len(shape) == 2:
        return x.unsqueeze(-1)
    return x.movedim(0, -2)


CASES = {
    "gae": (
        lambda d, **kw: F.vec_generalized_advantage_estimate(
            GAMMA, LMBDA, d["v"], d["nv"], d["r"], d["done"], d["term"], **kw
        ),
        lambda d: loop_gae(GAMMA, LMBDA, d["v"], d["nv"], d["r"], d["done"], d["term"]),
    ),
    "gae_loop_name": (
        lambda d, **kw: F.generalized_advantage_estimate(
            GAMMA, LMBDA, d["v"], d["nv"], d["r"], d["done"], d["term"], **kw
        ),
        lambda d: loop_gae(GAMMA, LMBDA, d["v"], d["nv"], d["r"], d["done"], d["term"]),
    ),
    "td_lambda_return": (
        lambda d, **kw: F.vec_td_lambda_return_estimate(
            GAMMA, LMBDA, d["nv"], d["r"], d["done"], d["term"], **kw
        ),
        lambda d: loop_td_lambda(GAMMA, LMBDA, d["nv"], d["r"], d["done"], d["term"]),
    ),
    "td_lambda_return_loop_name": (
        lambda d, **kw: F.td_lambda_return_estimate(
            GAMMA, LMBDA, d["nv"], d["r"], d["done"], d["term"], **kw
        ),
        lambda d: loop_td_lambda(GAMMA, LMBDA, d["nv"], d["r"], d["done"], d["term"]),
    ),
    "td_lambda_advantage": (
        lambda d, **kw: F.vec_td_lambda_advantage_estimate(
            GAMMA, LMBDA, d["v"], d["nv"], d["r"], d["done"], d["term"], **kw
        ),
        lambda d: loop_td_lambda(GAMMA, LMBDA, d["nv"], d["r"], d["done"], d["term"]) - d["v"],
    ),
    "td_lambda_advantage_loop_name": (
        lambda d, **kw: F.td_lambda_advantage_estimate(
            GAMMA, LMBDA, d["v"], d["nv"], d["r"], d["done"], d["term"], **kw
        ),
        lambda d: loop_td_lambda(GAMMA, LMBDA, d["nv"], d["r"], d["done"], d["term"]) - d["v"],
    ),
    "td1_return": (
        lambda d, **kw: F.vec_td1_return_estimate(
            GAMMA, d["nv"], d["r"], d["done"], d["term"], **kw
        ),
        lambda d: loop_td1(GAMMA, d["nv"], d["r"], d["done"], d["term"]),
    ),
    "td1_return_loop_name": (
        lambda d, **kw: F.td1_return_estimate(GAMMA, d["nv"], d["r"], d["done"], d["term"], **kw),
        lambda d: loop_td1(GAMMA, d["nv"], d["r"], d["done"], d["term"]),
    ),
    "td1_advantage": (
        lambda d, **kw: F.vec_td1_advantage_estimate(
            GAMMA, d["v"], d["nv"], d["r"], d["done"], d["term"], **kw
        ),
        lambda d: loop_td1(GAMMA, d["nv"], d["r"], d["done"], d["term"]) - d["v"],
    ),
    "td1_advantage_loop_name": (
        lambda d, **kw: F.td1_advantage_estimate(
            GAMMA, d["v"], d["nv"], d["r"], d["done"], d["term"], **kw
        ),
        lambda d: loop_td1(GAMMA, d["nv"], d["r"], d["done"], d["term"]) - d["v"],
    ),
    "vtrace": (
        lambda d, **kw: F.vtrace_advantage_estimate(
            GAMMA, d["log_pi"], d["log_mu"], d["v"], d["nv"], d["r"], d["done"], d["term"], **kw
        ),
        lambda d: loop_vtrace(
            GAMMA, d["log_pi"], d["log_mu"], d["v"], d["nv"], d["r"], d["done"], d["term"]
        ),
    ),
    "reward2go": (
        lambda d, **kw: F.reward2go(d["r"], d["done"], GAMMA, **kw),
        lambda d: loop_reward2go(GAMMA, d["r"], d["done"]),
    ),
}


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


class TestAgainstLoops:
    @pytest.mark.parametrize("shape", SHAPES, ids=str)
    @pytest.mark.parametrize("name", list(CASES))
    def test_time_dim_default(self, backend, name, shape):
        fn, ref = CASES[name]
        data = make_data(shape)
        for got, want in zip(_as_tuple(fn(data)), _as_tuple(ref(data)), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)

    @pytest.mark.parametrize("shape", SHAPES, ids=str)
    @pytest.mark.parametrize("name", list(CASES))
    def test_other_time_dim(self, backend, name, shape):
        fn, ref = CASES[name]
        data = make_data(shape, seed=1)
        moved = {}
        for k, x in data.items():
            moved[k], time_dim = alt_time(x, shape)
        got = _as_tuple(fn(moved, time_dim=time_dim))
        for g, want in zip(got, _as_tuple(ref(data)), strict=True):
            assert g.shape == moved["r"].shape
            torch.testing.assert_close(back_time(g, shape), want, rtol=1e-5, atol=1e-5)

    def test_float64(self, backend):
        data = make_data((2, 30, 1), dtype=torch.float64)
        adv, target = CASES["gae"][0](data)
        ref_adv, ref_target = CASES["gae"][1](data)
        assert adv.dtype == torch.float64
        torch.testing.assert_close(adv, ref_adv)
        torch.testing.assert_close(target, ref_target)

    def test_long_horizon(self, backend):
        # hundreds of steps: the doubling scan's windows and products reach far
        data = make_data((2, 700, 1), seed=3)
        for name in ("gae", "td_lambda_return", "reward2go"):
            fn, ref = CASES[name]
            for got, want in zip(_as_tuple(fn(data)), _as_tuple(ref(data)), strict=True):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


class TestSemantics:
    def test_lambda_zero_is_td0(self, backend):
        d = make_data((3, 12, 1))
        got = F.vec_td_lambda_return_estimate(GAMMA, 0.0, d["nv"], d["r"], d["done"], d["term"])
        torch.testing.assert_close(got, F.td0_return_estimate(GAMMA, d["nv"], d["r"], d["term"]))
        adv = F.vec_td_lambda_advantage_estimate(
            GAMMA, 0.0, d["v"], d["nv"], d["r"], d["done"], d["term"]
        )
        torch.testing.assert_close(
            adv, F.td0_advantage_estimate(GAMMA, d["v"], d["nv"], d["r"], d["done"], d["term"])
        )

    def test_lambda_one_is_td1(self, backend):
        d = make_data((3, 12, 1))
        got = F.vec_td_lambda_return_estimate(GAMMA, 1.0, d["nv"], d["r"], d["done"], d["term"])
        torch.testing.assert_close(
            got, F.vec_td1_return_estimate(GAMMA, d["nv"], d["r"], d["done"], d["term"])
        )

    def test_gae_lambda_one_target_is_td1(self, backend):
        d = make_data((3, 12, 1))
        # consistent values: inside a trajectory, V(s[t+1]) is the next step's V(s)
        inside = ~d["done"][..., :-1, :]
        d["nv"][..., :-1, :] = torch.where(inside, d["v"][..., 1:, :], d["nv"][..., :-1, :])
        _, target = F.vec_generalized_advantage_estimate(
            GAMMA, 1.0, d["v"], d["nv"], d["r"], d["done"], d["term"]
        )
        torch.testing.assert_close(
            target, F.vec_td1_return_estimate(GAMMA, d["nv"], d["r"], d["done"], d["term"])
        )

    def test_truncation_bootstraps_termination_does_not(self, backend):
        # [T=3]: step 0 truncated, step 1 terminated, step 2 the end of the batch
        r = torch.zeros(3, 1)
        v = torch.zeros(3, 1)
        nv = torch.tensor([[10.0], [20.0], [30.0]])
        done = torch.tensor([[True], [True], [False]])
        term = torch.tensor([[False], [True], [False]])
        adv, _ = F.vec_generalized_advantage_estimate(0.5, 0.9, v, nv, r, done, term)
        torch.testing.assert_close(adv.flatten(), torch.tensor([5.0, 0.0, 15.0]))

    def test_literal_gae(self, backend):
        v = torch.tensor([[1.0], [2.0], [3.0]])
        nv = torch.tensor([[2.0], [3.0], [4.0]])
        r = torch.tensor([[1.0], [1.0], [1.0]])
        done = torch.zeros(3, 1, dtype=torch.bool)
        adv, target = F.vec_generalized_advantage_estimate(0.5, 0.5, v, nv, r, done, done)
        # deltas: 1 + 1 - 1 = 1, 1 + 1.5 - 2 = 0.5, 1 + 2 - 3 = 0
        torch.testing.assert_close(adv.flatten(), torch.tensor([1.125, 0.5, 0.0]))
        torch.testing.assert_close(target, adv + v)

    def test_terminated_defaults_to_done(self, backend):
        d = make_data((2, 12, 1))
        a = F.vec_generalized_advantage_estimate(GAMMA, LMBDA, d["v"], d["nv"], d["r"], d["done"])
        b = F.vec_generalized_advantage_estimate(
            GAMMA, LMBDA, d["v"], d["nv"], d["r"], d["done"], d["done"]
        )
        torch.testing.assert_close(a, b)

    def test_tensor_gamma_per_step(self, backend):
        d = make_data((2, 12, 1))
        gamma = torch.rand(2, 12, 1) * 0.5 + 0.5
        got, _ = F.vec_generalized_advantage_estimate(
            gamma, LMBDA, d["v"], d["nv"], d["r"], d["done"], d["term"]
        )
        want, _ = loop_gae(gamma, LMBDA, d["v"], d["nv"], d["r"], d["done"], d["term"])
        torch.testing.assert_close(got, want)

    def test_gradients_flow_to_values(self, backend):
        d = make_data((2, 12, 1))
        v = d["v"].clone().requires_grad_()
        adv, _ = F.vec_generalized_advantage_estimate(
            GAMMA, LMBDA, v, d["nv"], d["r"], d["done"], d["term"]
        )
        adv.sum().backward()
        v_ref = d["v"].clone().requires_grad_()
        loop_gae(GAMMA, LMBDA, v_ref, d["nv"], d["r"], d["done"], d["term"])[0].sum().backward()
        torch.testing.assert_close(v.grad, v_ref.grad)


class TestErrors:
    def test_mismatched_shapes_name_each_tensor(self):
        v = torch.zeros(2, 5, 1)
        r = torch.zeros(2, 4, 1)
        done = torch.zeros(2, 5, 1, dtype=torch.bool)
        with pytest.raises(
            ValueError, match=r"reward has shape \(2, 4, 1\).*done has shape \(2, 5, 1\)"
        ):
            F.vec_generalized_advantage_estimate(0.9, 0.9, v, v, r, done)
        with pytest.raises(
            ValueError, match=r"next_state_value has shape \(2, 5, 1\), reward has shape"
        ):
            F.vec_td_lambda_return_estimate(0.9, 0.9, v, r, done)
        with pytest.raises(ValueError, match=r"reward has shape \(2, 4, 1\), done has shape"):
            F.reward2go(r, done)

    def test_time_dim_out_of_range(self):
        x = torch.zeros(2, 5, 1)
        with pytest.raises(ValueError, match="time_dim=3 is out of range"):
            F.reward2go(x, x.bool(), time_dim=3)

    def test_gamma_of_wrong_shape(self):
        x = torch.zeros(2, 5, 1)
        with pytest.raises(ValueError, match=r"gamma must be a scalar or shaped like the inputs"):
            F.vec_generalized_advantage_estimate(torch.ones(3), 0.9, x, x, x, x.bool())


def loop_non_rolling(gamma, lmbda, nv, r, done, term):
    """Return from each k with the constant gamma[k], lmbda[k], as TorchRL's loop."""
    T = r.shape[-2]
    nv = nv * ~term
    out = torch.empty_like(r)
    for k in range(T):
        g_k, l_k = _at(gamma, k), _at(lmbda, k)
        g = nv[..., -1, :]
        for i in reversed(range(k, T)):
            dn = done[..., i, :].to(r.dtype)
            g = g * (1 - dn) + nv[..., i, :] * dn
            g = r[..., i, :] + g_k * ((1 - l_k) * nv[..., i, :] + l_k * g)
        out[..., k, :] = g
    return out


class TestRollingGammaFalse:
    def _data(self):
        g = torch.Generator().manual_seed(3)
        shape = (3, 9, 2)
        done = torch.rand(shape, generator=g) < 0.25
        return {
            "gamma": torch.rand(shape, generator=g),
            "lmbda": torch.rand(shape, generator=g),
            "nv": torch.randn(shape, generator=g),
            "r": torch.randn(shape, generator=g),
            "done": done,
            "term": done & (torch.rand(shape, generator=g) < 0.5),
        }

    def test_by_hand(self):
        # values 0, rewards 1: the return from step 0 discounts every later step by
        # gamma[0] = 0.5 (1 + 0.5 = 1.5, then 1 + 0.5 + 0.25 = 1.75 over three steps)
        gamma = torch.tensor([[0.5], [0.1]])
        r, v = torch.ones(2, 1), torch.zeros(2, 1)
        done = torch.zeros(2, 1, dtype=torch.bool)
        out = F.td1_return_estimate(gamma, v, r, done, rolling_gamma=False)
        torch.testing.assert_close(out, torch.tensor([[1.5], [1.0]]))
        three = torch.tensor([[0.5], [0.1], [0.1]])
        out = F.td1_return_estimate(
            three,
            torch.zeros(3, 1),
            torch.ones(3, 1),
            torch.zeros(3, 1, dtype=torch.bool),
            rolling_gamma=False,
        )
        torch.testing.assert_close(out, torch.tensor([[1.75], [1.1], [1.0]]))

    @pytest.mark.parametrize("scalar_lmbda", [False, True])
    def test_td_lambda_against_loop(self, scalar_lmbda):
        d = self._data()
        lmbda = 0.7 if scalar_lmbda else d["lmbda"]
        out = F.td_lambda_return_estimate(
            d["gamma"], lmbda, d["nv"], d["r"], d["done"], d["term"], rolling_gamma=False
        )
        ref = loop_non_rolling(d["gamma"], lmbda, d["nv"], d["r"], d["done"], d["term"])
        torch.testing.assert_close(out, ref)
        adv = F.td_lambda_advantage_estimate(
            d["gamma"], lmbda, d["nv"], d["nv"], d["r"], d["done"], d["term"], rolling_gamma=False
        )
        torch.testing.assert_close(adv, ref - d["nv"])

    def test_td1_against_loop(self):
        d = self._data()
        out = F.td1_return_estimate(
            d["gamma"], d["nv"], d["r"], d["done"], d["term"], rolling_gamma=False
        )
        torch.testing.assert_close(
            out, loop_non_rolling(d["gamma"], 1.0, d["nv"], d["r"], d["done"], d["term"])
        )

    def test_time_dim(self):
        d = self._data()
        moved = {k: v.transpose(0, 1) for k, v in d.items()}
        out = F.td_lambda_return_estimate(
            moved["gamma"],
            moved["lmbda"],
            moved["nv"],
            moved["r"],
            moved["done"],
            moved["term"],
            rolling_gamma=False,
            time_dim=0,
        )
        ref = loop_non_rolling(d["gamma"], d["lmbda"], d["nv"], d["r"], d["done"], d["term"])
        torch.testing.assert_close(out, ref.transpose(0, 1))

    def test_scalars_are_refused_by_the_loop_version(self):
        x = torch.zeros(2, 5, 1)
        with pytest.raises(RuntimeError, match="time-sensitive gamma or lambda values"):
            F.td_lambda_return_estimate(0.9, 0.9, x, x, x.bool(), rolling_gamma=False)
        with pytest.raises(RuntimeError, match="time-sensitive gamma values"):
            F.td1_return_estimate(0.9, x, x, x.bool(), rolling_gamma=False)

    def test_vectorized_versions(self):
        d = self._data()
        args = (d["nv"], d["r"], d["done"], d["term"])
        # scalars: both conventions agree, the vectorized return computes
        torch.testing.assert_close(
            F.vec_td_lambda_return_estimate(0.9, 0.7, *args, rolling_gamma=False),
            F.vec_td_lambda_return_estimate(0.9, 0.7, *args),
        )
        with pytest.raises(NotImplementedError, match="When using rolling_gamma=False"):
            F.vec_td_lambda_return_estimate(d["gamma"], 0.7, *args, rolling_gamma=False)
        ends = torch.zeros_like(d["done"])
        ends[:, -1] = True
        with pytest.raises(NotImplementedError, match="The vectorized version of TD"):
            F.vec_td1_return_estimate(d["gamma"], d["nv"], d["r"], ends, ends, rolling_gamma=False)


@pytest.mark.parametrize("fn", ["gae", "td_lambda_return", "reward2go"])
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_stays_on_device(fn):
    data = {k: v.cuda() for k, v in make_data((4, 300, 1)).items()}
    compute, ref = CASES[fn]
    torch.cuda.set_sync_debug_mode("error")  # a host round trip would raise
    try:
        out = _as_tuple(compute(data))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for o in out:
        assert o.device.type == "cuda"
    cpu = {k: v.cpu() for k, v in data.items()}
    for o, want in zip(out, _as_tuple(ref(cpu)), strict=True):
        torch.testing.assert_close(o.cpu(), want, rtol=1e-4, atol=1e-4)


def test_one_element_gamma_and_lmbda_are_scalars():
    from rl.objectives.value.functional import vec_td_lambda_return_estimate

    value = torch.tensor([1.0, 2.0, 3.0, 4.0]).view(1, 4, 1)
    reward = torch.ones(1, 4, 1)
    done = torch.zeros(1, 4, 1, dtype=torch.bool)
    out = vec_td_lambda_return_estimate(
        torch.tensor([0.9]), torch.tensor([0.5]), value, reward, done
    )
    # plain loop over next values v: G[T-1] = r + g v[T-1], G[t] = r + g ((1 - l) v[t] + l G[t+1])
    expected, g = [], 1.0 + 0.9 * 4.0
    expected.append(g)
    for t in (2, 1, 0):
        g = 1.0 + 0.9 * (0.5 * value[0, t, 0].item() + 0.5 * g)
        expected.insert(0, g)
    torch.testing.assert_close(out.flatten(), torch.tensor(expected))

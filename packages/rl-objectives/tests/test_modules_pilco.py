"""WorldModel, RBFController and GPWorldModel (PILCO's moment matching) against Monte Carlo."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.modules import GPWorldModel, RBFController, WorldModel

F64 = torch.float64


class CatLinear(torch.nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.net = torch.nn.Linear(n_in, n_out)

    def forward(self, *xs):
        return self.net(torch.cat(xs, -1))


def linear_world_model(decoder=False):
    return WorldModel(
        TensorDictModule(torch.nn.Linear(6, 4), ["observation"], ["latent"]),
        TensorDictModule(CatLinear(6, 4), ["latent", "action"], [("next", "latent")]),
        TensorDictModule(torch.nn.Linear(4, 1), [("next", "latent")], [("next", "reward")]),
        decoder=TensorDictModule(torch.nn.Linear(4, 6), ["latent"], ["recon"]) if decoder else None,
    )


class TestWorldModel:
    def test_forward_is_encode_then_step(self):
        wm = linear_world_model()
        td = TensorDict(observation=torch.randn(3, 6), action=torch.randn(3, 2), batch_size=[3])
        out = wm(td.clone())
        z = wm.encoder.module(td["observation"])
        z1 = wm.dynamics.module(z, td["action"])
        torch.testing.assert_close(out["next", "latent"], z1)
        torch.testing.assert_close(out["next", "reward"], wm.reward_head.module(z1))
        stepped = wm.step(wm.encode(td.clone()))
        torch.testing.assert_close(stepped["next", "reward"], out["next", "reward"])
        assert wm.step_module is wm._step_seq
        assert "observation" not in wm.step_module.in_keys

    def test_decode(self):
        wm = linear_world_model(decoder=True)
        td = wm.encode(TensorDict(observation=torch.randn(3, 6), batch_size=[3]))
        assert wm.decode(td)["recon"].shape == (3, 6)
        with pytest.raises(RuntimeError, match="decoder"):
            linear_world_model().decode(td)


def gaussian(d, seed, scale=0.3):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(d, d, generator=g, dtype=F64) * scale
    return torch.randn(d, generator=g, dtype=F64), a @ a.T + 0.02 * torch.eye(d, dtype=F64)


class TestRBFController:
    def test_moments_match_monte_carlo(self):
        torch.manual_seed(0)
        policy = RBFController(3, 2, max_action=torch.tensor([1.5, 0.7]), n_basis=6).double()
        m, s = gaussian(3, 1)
        u_mean, u_cov, cross = policy(m, s)
        x = torch.distributions.MultivariateNormal(m, s).sample((200_000,))
        with torch.no_grad():
            k = torch.exp(
                -0.5 * ((x[:, None] - policy.centers) / policy.lengthscales).square().sum(-1)
            )
            y = policy.max_action * torch.sin(k @ policy.weights)
        torch.testing.assert_close(u_mean.detach(), y.mean(0), atol=2e-3, rtol=0)
        torch.testing.assert_close(u_cov.detach(), torch.cov(y.T), atol=5e-4, rtol=0)
        mc_cross = (x - x.mean(0)).T @ (y - y.mean(0)) / len(x)
        torch.testing.assert_close((s @ cross).detach(), mc_cross, atol=2e-3, rtol=0)

    def test_point_input_is_the_network(self):
        policy = RBFController(2, 1, max_action=None, n_basis=4).double()
        x = torch.randn(5, 2, dtype=F64)
        u_mean, u_cov, _ = policy(x, torch.zeros(5, 2, 2, dtype=F64))
        k = torch.exp(-0.5 * ((x[:, None] - policy.centers) / policy.lengthscales).square().sum(-1))
        torch.testing.assert_close(u_mean, k @ policy.weights)
        assert (u_cov.abs() < 1e-5).all()

    def test_shapes_symmetry_gradients(self):
        policy = RBFController(4, 3, max_action=2.0, n_basis=5)
        m = torch.randn(2, 7, 4)
        s = 0.1 * torch.eye(4).expand(2, 7, 4, 4)
        u_mean, u_cov, cross = policy(m, s)
        assert (u_mean.shape, u_cov.shape, cross.shape) == ((2, 7, 3), (2, 7, 3, 3), (2, 7, 4, 3))
        torch.testing.assert_close(u_cov, u_cov.mT)
        assert (torch.linalg.eigvalsh(u_cov) > -1e-6).all()
        (u_mean.sum() + u_cov.sum()).backward()
        assert all(p.grad is not None for p in policy.parameters())

    def test_squash_sin_moments(self):
        m, s = gaussian(2, 3)
        y_mean, y_cov, c = RBFController.squash_sin(m, s, 2.0)
        x = torch.distributions.MultivariateNormal(m, s).sample((200_000,))
        y = 2.0 * torch.sin(x)
        torch.testing.assert_close(y_mean, y.mean(0), atol=5e-3, rtol=0)
        torch.testing.assert_close(y_cov, torch.cov(y.T), atol=5e-3, rtol=0)
        mc_cross = (x - x.mean(0)).T @ (y - y.mean(0)) / len(x)
        torch.testing.assert_close(s @ c, mc_cross, atol=5e-3, rtol=0)

    def test_wrong_shape_raises(self):
        policy = RBFController(4, 1, max_action=1.0)
        with pytest.raises(ValueError, match=r"input_dim=4.*\(2, 3\)"):
            policy(torch.zeros(2, 3), torch.zeros(2, 3, 3))


def transitions(n=40, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=g, dtype=F64)
    u = torch.randn(n, 1, generator=g, dtype=F64)
    x_next = x + 0.3 * torch.sin(x) + 0.2 * u
    return TensorDict({"observation": x, "action": u, ("next", "observation"): x_next}, [n])


def belief(mx, sx, mu, su, c):
    return TensorDict(
        {
            ("observation", "mean"): mx,
            ("observation", "var"): sx,
            ("action", "mean"): mu,
            ("action", "var"): su,
            ("action", "cross_covariance"): c,
        },
        batch_size=mx.shape[:-1],
    )


@pytest.fixture(scope="module")
def gp():
    model = GPWorldModel(obs_dim=2, action_dim=1).double()
    model.fit(transitions(), max_iter=40)
    return model


class TestGPWorldModel:
    def test_fit_interpolates(self, gp):
        data = transitions(seed=1)[:5]
        q = TensorDict(
            {("observation", "mean"): data["observation"], ("action", "mean"): data["action"]}, [5]
        )
        pred = gp(q)["next", "observation", "mean"]
        torch.testing.assert_close(pred, data["next", "observation"], atol=0.05, rtol=0)
        assert gp(q)["next", "observation", "var"].shape == (5, 2, 2)

    def test_uncertain_tends_to_deterministic(self, gp):
        z = torch.zeros
        td = belief(
            torch.randn(3, 2, dtype=F64),
            1e-9 * torch.eye(2, dtype=F64).expand(3, 2, 2),
            torch.randn(3, 1, dtype=F64),
            z(3, 1, 1, dtype=F64),
            z(3, 2, 1, dtype=F64),
        )
        unc = gp.uncertain_forward(td.clone())
        det = gp.deterministic_forward(td.clone())
        for key in ("mean", "var"):
            torch.testing.assert_close(
                unc["next", "observation", key], det["next", "observation", key], atol=1e-6, rtol=0
            )

    def test_moment_matching_against_monte_carlo(self, gp):
        mx, sx = (
            torch.tensor([0.3, -0.2], dtype=F64),
            torch.tensor([[0.1, 0.02], [0.02, 0.05]], dtype=F64),
        )
        mu, su = torch.tensor([0.1], dtype=F64), torch.tensor([[0.04]], dtype=F64)
        c = torch.tensor([[0.2], [-0.1]], dtype=F64)
        out = gp(belief(mx[None], sx[None], mu[None], su[None], c[None]))
        # sample the joint [x, u] and push each sample through the GP posterior
        sxc = sx @ c
        joint = torch.cat([torch.cat([sx, sxc], -1), torch.cat([sxc.T, su], -1)], -2)
        s = torch.distributions.MultivariateNormal(torch.cat([mx, mu]), joint).sample((20_000,))
        point = gp.deterministic_forward(
            TensorDict({("observation", "mean"): s[:, :2], ("action", "mean"): s[:, 2:]}, [len(s)])
        )
        mean, var = point["next", "observation", "mean"], point["next", "observation", "var"]
        torch.testing.assert_close(
            out["next", "observation", "mean"][0], mean.mean(0), atol=8e-3, rtol=0
        )
        mc_cov = torch.cov(mean.T) + var.mean(0)
        torch.testing.assert_close(out["next", "observation", "var"][0], mc_cov, atol=8e-3, rtol=0)

    def test_dispatch(self, gp):
        z = torch.zeros
        certain = belief(
            z(1, 2, dtype=F64),
            z(1, 2, 2, dtype=F64),
            z(1, 1, dtype=F64),
            z(1, 1, 1, dtype=F64),
            z(1, 2, 1, dtype=F64),
        )
        calls = []
        gp_u, gp_d = gp.uncertain_forward, gp.deterministic_forward
        try:
            gp.uncertain_forward = lambda td: calls.append("u")
            gp.deterministic_forward = lambda td: calls.append("d")
            gp(certain)
            gp(certain.clone().set(("action", "var"), torch.ones(1, 1, 1, dtype=F64)))
        finally:
            gp.uncertain_forward, gp.deterministic_forward = gp_u, gp_d
        assert calls == ["d", "u"]

    def test_errors(self):
        model = GPWorldModel(2, 1)
        assert model.state_action_dim == 3
        with pytest.raises(RuntimeError, match="fit"):
            model.compute_factorizations()
        with pytest.raises(ValueError, match=r"covariance \[\.\.\., D, D\].*\(2,\)"):
            model(TensorDict({("observation", "var"): torch.ones(2)}))
        with pytest.raises(ValueError, match=r"'observation' \[n, 2\]"):
            model.fit(
                TensorDict(
                    {
                        "observation": torch.zeros(5, 3),
                        "action": torch.zeros(5, 1),
                        ("next", "observation"): torch.zeros(5, 3),
                    },
                    [5],
                )
            )

"""Tests of the multi-agent networks and the value mixers."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl.modules import MLP, ConvNet, MultiAgentConvNet, MultiAgentMLP, QMixer, VDNMixer

N_AGENTS = 3


def _mlp(centralized, share_params, **kwargs):
    return MultiAgentMLP(
        n_agent_inputs=4,
        n_agent_outputs=2,
        n_agents=N_AGENTS,
        centralized=centralized,
        share_params=share_params,
        depth=1,
        num_cells=8,
        **kwargs,
    )


def _agent_net(net, i):
    """The plain MLP of agent ``i`` (agent 0 when shared), built from the stacked params."""
    template = MLP(
        in_features=4 * (N_AGENTS if net.centralized else 1),
        out_features=2,
        depth=1,
        num_cells=8,
    )
    params = net.params if net.share_params else net.params[i]
    params.to_module(template)
    return template


class TestMultiAgentMLP:
    @pytest.mark.parametrize("centralized", [False, True])
    @pytest.mark.parametrize("share_params", [False, True])
    @pytest.mark.parametrize("batch", [(), (5,), (4, 2)])
    def test_matches_per_agent_loop(self, centralized, share_params, batch):
        torch.manual_seed(0)
        net = _mlp(centralized, share_params)
        x = torch.randn(*batch, N_AGENTS, 4)
        out = net(x)
        assert out.shape == (*batch, N_AGENTS, 2)
        for i in range(N_AGENTS):
            agent_in = x.flatten(-2) if centralized else x[..., i, :]
            torch.testing.assert_close(out[..., i, :], _agent_net(net, i)(agent_in))

    def test_parameter_stacking(self):
        assert _mlp(False, False).params["0", "weight"].shape == (N_AGENTS, 8, 4)
        assert _mlp(True, False).params["0", "weight"].shape == (N_AGENTS, 8, 12)
        assert _mlp(False, True).params["0", "weight"].shape == (8, 4)

    def test_share_params_identical_inputs_identical_outputs(self):
        x = torch.randn(6, 1, 4).expand(6, N_AGENTS, 4)
        shared = _mlp(False, True)(x)
        torch.testing.assert_close(shared[:, 0], shared[:, 1])
        torch.testing.assert_close(shared[:, 0], shared[:, 2])
        unshared = _mlp(False, False)(x)
        assert not torch.allclose(unshared[:, 0], unshared[:, 1])
        central = _mlp(True, True)(torch.randn(6, N_AGENTS, 4))
        torch.testing.assert_close(central[:, 0], central[:, 2])

    def test_gradients_and_state_dict_round_trip(self):
        net = _mlp(False, False)
        net(torch.randn(5, N_AGENTS, 4)).sum().backward()
        assert all(p.grad is not None for p in net.parameters())
        assert list(net.state_dict()) == [
            "params.0.weight", "params.0.bias", "params.2.weight", "params.2.bias"
        ]  # fmt: skip
        other = _mlp(False, False)
        other.load_state_dict(net.state_dict())
        x = torch.randn(5, N_AGENTS, 4)
        torch.testing.assert_close(other(x), net(x))

    def test_stateful_net_round_trip(self):
        net = _mlp(False, False)
        stateful = net.get_stateful_net()
        with torch.no_grad():
            for p in stateful.parameters():
                p.fill_(0.5)
        net.from_stateful_net(stateful)
        assert (net.params["0", "weight"] == 0.5).all()

    def test_vmap_ensemble(self):
        nets = [_mlp(False, False) for _ in range(2)]
        params = torch.stack([TensorDict.from_module(n) for n in nets])
        template = _mlp(False, False)
        x = torch.randn(5, N_AGENTS, 4)

        def call(p, x):
            with p.to_module(template):
                return template(x)

        out = torch.vmap(call, (0, None))(params, x)
        for i, net in enumerate(nets):
            torch.testing.assert_close(out[i], net(x))

    @pytest.mark.parametrize(("share_params", "expected"), [(False, 2.95199), (True, -4.19046)])
    def test_use_td_params_as_torchrl(self, share_params, expected):
        # TorchRL 0.14.1: same seed, same parameters and output in both modes
        outs = {}
        for use_td_params in (True, False):
            torch.manual_seed(0)
            net = _mlp(False, share_params, use_td_params=use_td_params)
            assert net.use_td_params is use_td_params
            prefix = "params" if use_td_params else "_empty_net"
            assert list(net.state_dict()) == [
                f"{prefix}.{k}" for k in ("0.weight", "0.bias", "2.weight", "2.bias")
            ]
            assert [n for n, _ in net.named_parameters()] == list(net.state_dict())
            assert type(net.params).__name__ == (
                "TensorDictParams" if use_td_params else "TensorDict"
            )
            outs[use_td_params] = out = net(torch.ones(5, N_AGENTS, 4))
            assert out.sum().item() == pytest.approx(expected, abs=1e-4)
            out.sum().backward()
            assert all(p.grad is not None for p in net.parameters())
        torch.testing.assert_close(outs[True], outs[False])

    def test_use_td_params_false_params_follow_the_module(self):
        torch.manual_seed(0)
        net = _mlp(False, False, use_td_params=False)
        named = dict(net.named_parameters())
        assert all(named["_empty_net." + ".".join(k)] is v for k, v in net.params.items(True, True))
        x = torch.randn(5, N_AGENTS, 4)
        copied = copy.deepcopy(net)  # a target network: its own parameters
        with torch.no_grad():
            for p in copied.parameters():
                p.add_(1.0)
        assert not torch.allclose(copied(x), net(x))
        other = _mlp(False, False, use_td_params=False)
        other.load_state_dict(copied.state_dict())
        torch.testing.assert_close(other(x), copied(x))
        torch.testing.assert_close(pickle.loads(pickle.dumps(net))(x), net(x))
        stateful = net.get_stateful_net(copy=True)
        with torch.no_grad():
            for p in stateful.parameters():
                p.fill_(0.25)
        net.from_stateful_net(stateful)
        assert (net.params["0", "weight"] == 0.25).all()
        with pytest.raises(RuntimeError, match="params.0.weight"):
            _mlp(False, False).load_state_dict(net.state_dict())  # the modes do not mix

    def test_errors(self):
        net = _mlp(False, False)
        with pytest.raises(ValueError, match=r"n_agents=3, 4\], got \(5, 2, 4\)"):
            net(torch.randn(5, 2, 4))
        with pytest.raises(TypeError, match="centralized"):
            MultiAgentMLP(4, 2, 3, share_params=True)

    @pytest.mark.parametrize("centralized", [False, True])
    @pytest.mark.parametrize("share_params", [False, True])
    def test_lazy_input_size(self, centralized, share_params):
        """n_agent_inputs=None: layers sized at the first call; an optimizer built before
        it trains the materialized parameters; each agent draws its own weights."""
        torch.manual_seed(0)
        net = MultiAgentMLP(None, 2, 3, centralized=centralized, share_params=share_params)
        lazy = [p for p in net.parameters() if isinstance(p, nn.parameter.UninitializedParameter)]
        assert lazy
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        x = torch.randn(5, 3, 4)
        out = net(x)
        assert out.shape == (5, 3, 2) and net.initialized
        assert not any(isinstance(p, nn.parameter.UninitializedParameter) for p in net.parameters())
        if not share_params:
            assert not torch.isclose(
                net.params[0]["0", "weight"], net.params[1]["0", "weight"]
            ).any()
        before = net.params.detach().clone()
        out.pow(2).mean().backward()
        opt.step()
        assert (net.params.detach() != before).any()
        # the same maths as a per-agent loop over the materialized parameters
        want = []
        for i in range(3):
            params = net.params if share_params else net.params[i]
            with params.to_module(net._empty_net):
                inp = x.flatten(-2) if centralized else x[:, i]
                want.append(net._empty_net(inp))
        torch.testing.assert_close(net(x), torch.stack(want, -2))


class TestMultiAgentConvNet:
    @pytest.mark.parametrize("centralized", [False, True])
    @pytest.mark.parametrize("share_params", [False, True])
    @pytest.mark.parametrize("use_td_params", [True, False])
    def test_matches_per_agent_loop(self, centralized, share_params, use_td_params):
        torch.manual_seed(0)
        net = MultiAgentConvNet(
            n_agents=2,
            centralized=centralized,
            share_params=share_params,
            use_td_params=use_td_params,
            in_features=3,
            num_cells=[4],
            kernel_sizes=3,
            strides=1,
        )
        x = torch.randn(5, 2, 3, 6, 6)
        out = net(x)
        assert out.shape == (5, 2, 4 * 4 * 4)
        for i in range(2):
            template = ConvNet(
                in_features=3 * (2 if centralized else 1), num_cells=[4], kernel_sizes=3
            )
            (net.params if share_params else net.params[i]).to_module(template)
            agent_in = x.flatten(-4, -3) if centralized else x[:, i]
            torch.testing.assert_close(out[:, i], template(agent_in))


class TestMultiAgentExport:
    """``torch.export`` of unshared networks: the exported program reads the stacked
    parameters as inputs (no constants), matches eager, and leaves the module as it was."""

    @pytest.mark.parametrize(
        "centralized, use_td_params, conv",
        [
            (False, True, False),
            # each export traces for seconds: the other layouts run with the slow tests
            pytest.param(True, False, False, marks=pytest.mark.slow),
            pytest.param(False, False, True, marks=pytest.mark.slow),
        ],
    )
    def test_export_matches_eager(self, centralized, use_td_params, conv):
        from tensordict.nn import TensorDictModule

        torch.manual_seed(0)
        if conv:
            net = MultiAgentConvNet(
                n_agents=N_AGENTS,
                centralized=centralized,
                share_params=False,
                use_td_params=use_td_params,
                in_features=3,
                num_cells=[4],
                kernel_sizes=3,
                strides=1,
            )
            x = torch.randn(2, N_AGENTS, 3, 6, 6)
        else:
            net = _mlp(centralized, False, use_td_params=use_td_params)
            x = torch.randn(5, N_AGENTS, 4)
        state = {k: v.clone() for k, v in net.state_dict().items()}
        template = {k: v for k, v in TensorDict.from_module(net._empty_net).items(True, True)}
        module = TensorDictModule(net, in_keys=["input"], out_keys=["output"])
        module.select_out_keys("output")  # kwargs in, the output tensor out
        exported = torch.export.export(module, args=(), kwargs={"input": x}, strict=True)
        assert not exported.constants
        torch.testing.assert_close(exported.module()(input=x), net(x))
        torch.testing.assert_close(net.state_dict(), state)
        after = TensorDict.from_module(net._empty_net)
        assert all(after.get(k) is v for k, v in template.items())

    def test_vmap_func_module_eager(self):
        torch.manual_seed(0)
        net = _mlp(False, False)
        mapped = net.vmap_func_module(net._empty_net, in_dims=(0, -2), out_dims=(-2,))
        x = torch.randn(5, N_AGENTS, 4)
        torch.testing.assert_close(mapped(net.params, x), net(x))


class TestMixers:
    def test_vdn_is_sum(self):
        q = torch.randn(4, 5, N_AGENTS, 1)
        out = VDNMixer(n_agents=N_AGENTS, device="cpu")(q)
        torch.testing.assert_close(out, q.sum(-2))
        assert out.shape == (4, 5, 1)

    def test_qmixer_shapes_formula_and_monotonic(self):
        torch.manual_seed(0)
        mixer = QMixer(state_shape=(6,), mixing_embed_dim=8, n_agents=N_AGENTS, device="cpu")
        q = torch.randn(4, 2, N_AGENTS, 1, requires_grad=True)
        state = torch.randn(4, 2, 6)
        out = mixer(q, state)
        assert out.shape == (4, 2, 1)
        s = state.reshape(-1, 6)
        w1 = mixer.hyper_w_1(s).abs().view(-1, N_AGENTS, 8)
        hidden = torch.nn.functional.elu(
            (q.reshape(-1, N_AGENTS, 1) * w1).sum(1) + mixer.hyper_b_1(s)
        )
        expected = (hidden * mixer.hyper_w_final(s).abs()).sum(-1, keepdim=True) + mixer.V(s)
        torch.testing.assert_close(out, expected.view(4, 2, 1))
        out.sum().backward()
        assert (q.grad >= 0).all()

    def test_errors(self):
        with pytest.raises(ValueError, match=r"chosen_action_value of shape \[\*B, 3, 1\]"):
            VDNMixer(n_agents=N_AGENTS, device="cpu")(torch.randn(4, 2, 1))
        mixer = QMixer(state_shape=(6,), mixing_embed_dim=8, n_agents=N_AGENTS, device="cpu")
        with pytest.raises(ValueError, match=r"state ending with shape \(6,\)"):
            mixer(torch.randn(4, N_AGENTS, 1), torch.randn(4, 5))
        with pytest.raises(ValueError, match="takes 2 input"):
            mixer(torch.randn(4, N_AGENTS, 1))

    def test_errors_carry_torchrl_wording(self):
        mixer = QMixer(state_shape=(6,), mixing_embed_dim=8, n_agents=N_AGENTS, device="cpu")
        with pytest.raises(ValueError, match="^Mixer that needs state was passed more than 2"):
            mixer(torch.randn(4, N_AGENTS, 1))
        with pytest.raises(ValueError, match="Mixer that doesn't need state was passed more"):
            VDNMixer(n_agents=N_AGENTS, device="cpu")(
                torch.randn(4, N_AGENTS, 1), torch.randn(4, 6)
            )
        match = r"Mixer network expected chosen_action_value with last 2 dimensions \(3, 1\)"
        with pytest.raises(ValueError, match=match):
            mixer(torch.randn(4, 2, 1), torch.randn(4, 6))
        with pytest.raises(
            ValueError, match=r"Mixer network expected state with ending shape \(6,\)"
        ):
            mixer(torch.randn(4, N_AGENTS, 1), torch.randn(4, 5))


# tensordict warns that TensorDictParams' lock checks are skipped inside a compiled graph
@pytest.mark.filterwarnings("ignore:Using lock_:UserWarning")
def test_compiled_fullgraph_matches_eager():
    net = _mlp(False, False)
    x = torch.randn(5, N_AGENTS, 4)
    compiled = torch.compile(net, fullgraph=True, backend="eager")
    torch.testing.assert_close(compiled(x), net(x))


class TestMultiAgentMLPTraced:
    """Under ``torch.compile`` a plain MultiAgentMLP runs as a function of its parameters'
    tensors (no template attribute written): one graph, no recompilation when the
    weights move or a loss swaps its own parameters in, the eager values."""

    @pytest.mark.filterwarnings("ignore:Using lock_:UserWarning")
    @pytest.mark.parametrize("use_td_params", [True, False])
    @pytest.mark.parametrize("share_params", [False, True])
    @pytest.mark.parametrize("centralized", [False, True])
    def test_one_graph_equals_the_tensordict_forward(
        self, centralized, share_params, use_td_params
    ):
        from tensordict.nn import TensorDictModule
        from torch._dynamo.utils import counters

        torch.manual_seed(0)
        net = _mlp(centralized, share_params, use_td_params=use_td_params)
        module = TensorDictModule(net, [("agents", "obs")], [("agents", "out")])
        agent_nets = [_agent_net(net, i) for i in range(N_AGENTS)]
        torch._dynamo.reset()
        counters.clear()
        # as a policy is compiled: the TensorDict module around the network
        compiled = torch.compile(module, fullgraph=True, backend="eager")
        with torch._dynamo.config.patch(error_on_recompile=True):
            for step in range(3):
                x = torch.randn(5, N_AGENTS, 4)
                td = TensorDict({"agents": TensorDict(obs=x, batch_size=[5, N_AGENTS])}, [5])
                out = compiled(td)["agents", "out"]
                # each agent's MLP on its input (no eager call of ``net`` in between)
                for i in range(N_AGENTS):
                    agent_input = x.flatten(-2) if centralized else x[:, i]
                    torch.testing.assert_close(out[:, i], agent_nets[i](agent_input))
                with torch.no_grad():  # an optimizer step: the next call reads the new weights
                    for p in net.params.values(True, True):
                        p.add_(0.1 * (step + 1))
        assert counters["stats"]["unique_graphs"] == 1
        assert not counters["graph_break"]  # (a recompilation raises: error_on_recompile)
        # a loss's own copy of the parameters (plain tensors), swapped in for the call
        other = TensorDict.from_module(net).data.apply(lambda p: p * 2)
        with other.to_module(net):
            torch.testing.assert_close(torch.compile(net, backend="eager")(x), net(x))
        # the eager forward
        fresh = td.exclude(("agents", "out"))
        with torch._dynamo.config.patch(error_on_recompile=True):
            out = compiled(fresh.clone())["agents", "out"]
        torch.testing.assert_close(out, module(fresh)["agents", "out"])

    @pytest.mark.parametrize("share_params", [False, True])
    @pytest.mark.parametrize("steps", [3, 5])
    def test_an_agent_dim_before_other_dims_keeps_the_generic_path(self, share_params, steps):
        from rl.modules import MultiAgentNetBase

        class TimeMajor(MultiAgentNetBase):  # inputs [B, agents, T, F]: agent_dim -3
            def __init__(self):
                super().__init__(
                    n_agents=N_AGENTS, centralized=False, share_params=share_params, agent_dim=-3
                )

            def _build_single_net(self, **kwargs):
                return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))

            def _pre_forward_check(self, inputs):
                return inputs

        torch.manual_seed(0)
        net = TimeMajor()
        x = torch.randn(5, N_AGENTS, steps, 4)
        torch._dynamo.reset()
        compiled = torch.compile(net, backend="eager")(x)
        assert compiled.shape == (5, N_AGENTS, steps, 2)
        torch.testing.assert_close(compiled, net(x))

    @pytest.mark.filterwarnings("ignore:Using lock_:UserWarning")
    def test_other_layers_keep_the_generic_path(self):
        torch.manual_seed(0)
        net = _mlp(False, False, norm_class=nn.LayerNorm, norm_kwargs={"normalized_shape": 8})
        assert net._linear_layers is None
        x = torch.randn(5, N_AGENTS, 4)
        torch._dynamo.reset()
        compiled = torch.compile(net, backend="eager")
        torch.testing.assert_close(compiled(x), net(x))

    def test_a_pickle_from_before_the_traced_forward_gets_its_plan(self):
        net = _mlp(False, False)
        names = [name for name, _ in net._linear_layers]
        assert names == [name for name, _ in pickle.loads(pickle.dumps(net))._linear_layers]
        del net.__dict__["_linear_layers"]  # as an object pickled by an older version
        restored = pickle.loads(pickle.dumps(net))
        assert [name for name, _ in restored._linear_layers] == names == ["0", None, "2"]

"""An ensemble of MLP critics runs as batched products on its stacks (``_BatchedMLP``)
where the products are small or the members many, and eagerly otherwise as each
member's own products on its rows of the stacks (``_BatchedMLP.members``, no member
module called). The values and gradients equal the members called one by one; anything
the plan cannot honour (a hook, a norm layer, dropout) keeps the member calls."""

import copy

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from rl.modules import MLP, ValueOperator
from rl.objectives import LossModule, SoftUpdate
from rl.objectives import _loss as loss_module
from rl.objectives._networks import _BatchedMLP


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield


class _Ensemble(LossModule):
    def __init__(self, critic, n=2):
        super().__init__()
        self.convert_to_functional(
            critic, "qvalue_network", expand_dim=n, create_target_params=True
        )

    def forward(self, td):  # pragma: no cover - not used
        raise NotImplementedError


def _mlp_critic(out_features=1, **kwargs):
    torch.manual_seed(0)
    net = MLP(in_features=5, out_features=out_features, num_cells=[16, 16], **kwargs)
    return ValueOperator(net, in_keys=["observation", "action"])


def _data(*batch):
    torch.manual_seed(1)
    return TensorDict(
        {"observation": torch.randn(*batch, 3), "action": torch.randn(*batch, 2)}, list(batch)
    )


def _loss(critic, n=2):
    loss = _Ensemble(critic, n=n)
    SoftUpdate(loss, tau=0.5)
    with torch.no_grad():  # targets distinct from the online stack
        for p in loss.target_qvalue_network_params.values(True, True):
            p.mul_(0.5)
    return loss


def _values(loss, kind, td, index=None, overrides=None, key="state_action_value"):
    return loss._ensemble_values("qvalue_network", kind, td, key, overrides, index)


def _member_calls(loss, *args, **kwargs):
    """The same call with the batched plan off: the members run one by one."""
    info = loss._functional["qvalue_network"]
    plan, info["batched"] = info["batched"], None
    try:
        return _values(loss, *args, **kwargs)
    finally:
        info["batched"] = plan


def _no_member_calls(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a member module ran")

    monkeypatch.setattr(LossModule, "_ensemble", refuse)


@pytest.mark.parametrize("n", [2, 4, 10])
@pytest.mark.parametrize("batch", [(7,), (3, 4), ()], ids=["flat", "2d", "unbatched"])
def test_eager_values_and_gradients_equal_the_member_calls(monkeypatch, n, batch):
    loss = _loss(_mlp_critic(), n=n)
    assert isinstance(loss._functional["qvalue_network"]["batched"], _BatchedMLP)
    td = _data(*batch)
    action = torch.randn(*batch, 2, requires_grad=True)
    stacks = list(loss.qvalue_network_params.values(True, True))

    expected = {}
    for kind in ("online", "detached", "target"):
        out = _member_calls(loss, kind, td, overrides={"action": action})
        grads = torch.autograd.grad(
            out.square().sum(), [action, *stacks] if kind == "online" else [action]
        )
        expected[kind] = (out.detach(), grads)

    with monkeypatch.context() as patch:
        _no_member_calls(patch)
        for kind in ("online", "detached", "target"):
            out = _values(loss, kind, td, overrides={"action": action})
            assert out.shape == (n, *batch, 1)
            assert out.requires_grad  # through the action, whatever the kind
            params = [action, *stacks] if kind == "online" else [action]
            grads = torch.autograd.grad(out.square().sum(), params, allow_unused=True)
            torch.testing.assert_close(out, expected[kind][0])
            for got, want in zip(grads, expected[kind][1], strict=True):
                torch.testing.assert_close(got, want)
    # only the online kind reaches the stacks: detached and target ones take no gradient
    for kind in ("detached", "target"):
        out = _values(loss, kind, td)
        assert not out.requires_grad
    # the target kind reads the target stacks (halved above), not the online ones
    assert not torch.allclose(_values(loss, "target", td), _values(loss, "detached", td))


def test_a_drawn_subset_of_target_rows_is_gathered_and_an_online_subset_runs_its_products(
    monkeypatch,
):
    loss = _loss(_mlp_critic(), n=4)
    td = _data(6)
    index = torch.tensor([3, 1])
    for kind in ("target", "detached"):
        want = _member_calls(loss, kind, td, index=index)
        with monkeypatch.context() as patch:
            _no_member_calls(patch)
            torch.testing.assert_close(_values(loss, kind, td, index=index), want)
    # online: each drawn member's own products on its rows of the stacks (a gathered
    # stack would scatter its gradients back into a zero stack), a row drawn twice twice
    stacks = list(loss.qvalue_network_params.values(True, True))
    for drawn in ([3, 1], [2, 0, 2]):
        index = torch.tensor(drawn)
        want = _member_calls(loss, "online", td, index=index)
        want_grads = torch.autograd.grad(want.square().sum(), stacks)
        routes = _traced_routes(monkeypatch)
        with monkeypatch.context() as patch:
            _no_member_calls(patch)
            out = _values(loss, "online", td, index=index)
        assert routes == ["members"] and out.shape == (len(drawn), 6, 1)
        assert torch.equal(out, want)
        grads = torch.autograd.grad(out.square().sum(), stacks)
        for got, expected in zip(grads, want_grads, strict=True):
            assert torch.equal(got, expected)
        undrawn = sorted(set(range(4)) - set(drawn))
        assert grads[0][undrawn].abs().sum() == 0 and grads[0][drawn].abs().sum() > 0


def test_a_reshaped_output_and_a_sequential_network_are_batched(monkeypatch):
    loss = _loss(_mlp_critic(out_features=(2, 3)), n=3)
    td = _data(5)
    want = _member_calls(loss, "online", td)
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1, bias=False))
    loss_seq = _loss(TensorDictModule(seq, ["observation"], ["q"]), n=2)
    want_seq = _member_calls(loss_seq, "online", td, key="q")
    with monkeypatch.context() as patch:
        _no_member_calls(patch)
        got = _values(loss, "online", td)
        got_seq = _values(loss_seq, "online", td, key="q")
    assert got.shape == (3, 5, 2, 3)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_seq, want_seq)


@pytest.mark.parametrize(
    "critic",
    [
        lambda: _mlp_critic(norm_class=nn.LayerNorm, norm_kwargs={"normalized_shape": 16}),
        lambda: _mlp_critic(dropout=0.1),
        lambda: _mlp_critic(single_bias_last_layer=True),
        lambda: TensorDictModule(
            nn.Sequential(nn.Linear(3, 4), nn.Flatten(0)), ["observation"], ["q"]
        ),
        lambda: TensorDictModule(nn.Linear(3, 1), ["observation"], ["q"]),
        lambda: TensorDictModule(nn.Sequential(nn.Tanh()), ["observation"], ["q"]),
        lambda: TensorDictModule(
            nn.Sequential(nn.ReLU(inplace=True), nn.Linear(3, 1)), ["observation"], ["q"]
        ),
        lambda: TensorDictModule(
            nn.Sequential(*(lambda lin: [lin, nn.Tanh(), lin])(nn.Linear(3, 3))),
            ["observation"],
            ["q"],
        ),
    ],
    ids=[
        "layernorm",
        "dropout",
        "shared-bias",
        "flatten",
        "not-a-sequential",
        "no-parameters",
        "activation-first",
        "tied-weights",
    ],
)
def test_networks_the_batched_form_cannot_honour_keep_no_plan(critic):
    loss = _Ensemble(critic(), n=2)
    assert loss._functional["qvalue_network"]["batched"] is None
    # the members run, as before
    td = _data(4)
    out = _values(loss, "online", td, key=loss.qvalue_network.out_keys[0])
    assert out.shape[0] == 2


def test_an_activation_used_at_two_positions_runs_at_both(monkeypatch):
    """nn.Sequential yields a module used twice at each of its positions (named_children
    would list it once): the batched steps apply it twice, as the members do."""
    act = nn.Tanh()
    torch.manual_seed(0)
    seq = nn.Sequential(nn.Linear(3, 8), act, nn.Linear(8, 8), act, nn.Linear(8, 1))
    loss = _loss(TensorDictModule(seq, ["observation"], ["q"]), n=2)
    assert [s[0] for s in loss._functional["qvalue_network"]["batched"].steps] == [
        "linear", "act", "linear", "act", "linear",
    ]  # fmt: skip
    td = _data(5)
    want = _member_calls(loss, "online", td, key="q")
    with monkeypatch.context() as patch:
        _no_member_calls(patch)
        torch.testing.assert_close(_values(loss, "online", td, key="q"), want)


def test_an_activated_last_layer_is_a_fresh_tensor_the_caller_may_change(monkeypatch):
    """With ``activate_last_layer`` the output is the activation's own (Tanh saves it
    for its backward): it is copied, as the members' stack was."""
    loss = _loss(_mlp_critic(activate_last_layer=True), n=2)
    td = _data(5)
    want = _member_calls(loss, "online", td)
    with monkeypatch.context() as patch:
        _no_member_calls(patch)
        out = _values(loss, "online", td)
    torch.testing.assert_close(out, want)
    out.mul_(2.0)
    out.sum().backward()  # no "modified by an inplace operation"
    grads = [p.grad for p in loss.qvalue_network_params.values(True, True)]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)


def test_members_given_with_different_layers_keep_their_own_calls():
    """Networks given as a list share parameter names, not necessarily activations: no
    plan unless every one has member 0's layers."""
    torch.manual_seed(0)
    tanh = ValueOperator(
        MLP(in_features=5, out_features=1, num_cells=[16]), ["observation", "action"]
    )
    relu = ValueOperator(
        MLP(in_features=5, out_features=1, num_cells=[16], activation_class=nn.ReLU),
        ["observation", "action"],
    )
    loss = _Ensemble([tanh, relu], n=2)
    assert loss._functional["qvalue_network"]["batched"] is None
    td = _data(4)
    x = torch.cat([td["observation"], td["action"]], -1)
    torch.testing.assert_close(
        _values(loss, "online", td)[1], relu(td.clone())["state_action_value"]
    )
    assert torch.allclose(_values(loss, "online", td)[0], tanh.module(x))
    same = _Ensemble([tanh, copy.deepcopy(tanh)], n=2)
    assert same._functional["qvalue_network"]["batched"] is not None
    # a given network with a hook, a forward of its own or other outputs: no plan either
    hooked = copy.deepcopy(tanh)
    hooked.module[1].register_forward_hook(lambda mod, args, out: out * 0)
    patched = copy.deepcopy(tanh)
    patched.module.forward = lambda *xs: torch.zeros(4, 1)
    renamed = ValueOperator(copy.deepcopy(tanh.module), ["observation", "action"], ["other"])
    for other in (hooked, patched, renamed):
        assert _Ensemble([tanh, other], n=2)._functional["qvalue_network"]["batched"] is None
    out = _values(_Ensemble([tanh, hooked], n=2), "online", td)
    torch.testing.assert_close(out[1], hooked.module(x))  # its hook honoured


@pytest.mark.parametrize("change", ["replace", "parametrize", "forward", "mlp-forward"])
def test_a_layer_changed_on_member_zero_after_the_loss_was_built_runs_the_members(change):
    from torch.nn.utils import parametrize

    loss = _loss(_mlp_critic(), n=2)
    td = _data(4)
    before = _values(loss, "online", td)
    seq = loss.qvalue_network.module
    if change == "replace":
        seq[1] = nn.ReLU()
    elif change == "parametrize":

        class _Double(nn.Module):
            def forward(self, w):
                return 2 * w

        parametrize.register_parametrization(seq[2], "weight", _Double())
    elif change == "forward":
        seq[1].forward = lambda x: x
    else:
        seq.forward = lambda *xs: torch.full((*xs[0].shape[:-1], 1), 100.0)
    after = _values(loss, "online", td)
    assert not loss._functional["qvalue_network"]["batched"].usable(loss.qvalue_network, False)
    # member 0 ran its changed layers (member 1 is a copy made at construction)
    x = torch.cat([td["observation"], td["action"]], -1)
    torch.testing.assert_close(after[0], seq(x))
    assert not torch.allclose(after[0], before[0])


def test_a_hook_on_member_zero_is_honoured_then_the_batched_form_resumes(monkeypatch):
    loss = _loss(_mlp_critic(), n=2)
    td = _data(4)
    seen = []
    handle = loss.qvalue_network.module[0].register_forward_hook(
        lambda mod, args, out: seen.append(out.shape)
    )
    out = _values(loss, "online", td)
    assert seen == [torch.Size([4, 16])]  # member 0 ran, its hook with it
    handle.remove()
    with monkeypatch.context() as patch:
        _no_member_calls(patch)
        torch.testing.assert_close(_values(loss, "online", td), out)
    # a hook registered for every module declines the batched form too: it sees each
    # member's layers ([4, 16]), never a batched [2, 4, 16]
    seen.clear()
    handle = nn.modules.module.register_module_forward_hook(
        lambda mod, args, out: seen.append(tuple(out.shape))
    )
    try:
        _values(loss, "online", td)
    finally:
        handle.remove()
    assert (4, 16) in seen and not any(len(shape) == 3 for shape in seen)


def test_a_copied_or_cast_loss_runs_its_own_network_and_stacks(monkeypatch):
    loss = _loss(_mlp_critic(), n=2)
    copied = copy.deepcopy(loss)
    plan = copied._functional["qvalue_network"]["batched"]
    assert plan.network is copied.qvalue_network
    assert plan.network is not loss.qvalue_network
    with torch.no_grad():
        for p in copied.qvalue_network_params.values(True, True):
            p.mul_(2.0)
    td = _data(5)
    want_copied = _member_calls(copied, "online", td)
    loss.double()
    td64 = td.apply(lambda t: t.double())
    want64 = _member_calls(loss, "online", td64)
    with monkeypatch.context() as patch:
        _no_member_calls(patch)  # both still batched
        torch.testing.assert_close(_values(copied, "online", td), want_copied)
        out = _values(loss, "online", td64)
        assert out.dtype == torch.float64
        torch.testing.assert_close(out, want64)
    assert not torch.allclose(want_copied.double(), want64)


def _traced_routes(monkeypatch):
    """Which ensemble calls took the batched form (``"batched"``) or each member's own
    products (``"members"``): each eager call, or each traced one when compiled
    (recorded while dynamo traces)."""
    routes = []
    call, members = _BatchedMLP.__call__, _BatchedMLP.members

    def recording(self, tensors, inputs):
        routes.append("batched")
        return call(self, tensors, inputs)

    def recording_members(self, tensors, inputs, rows=None, **kwargs):
        routes.append("members")
        return members(self, tensors, inputs, rows, **kwargs)

    monkeypatch.setattr(_BatchedMLP, "__call__", recording)
    monkeypatch.setattr(_BatchedMLP, "members", recording_members)
    return routes


@pytest.mark.parametrize(
    "n,rows,batched", [(2, 8, True), (2, 64, False), (4, 64, True)], ids=["small", "large", "many"]
)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_pairs_of_large_products_keep_the_member_products(monkeypatch, compiled, n, rows, batched):
    """A pair runs batched while a layer's product stays under _BATCHED_MACS; more
    members always (compiled: instead of vmap). A pair past the bound runs each member's
    products eagerly, the template on each row compiled. Values and gradients equal the
    member calls'."""
    monkeypatch.setattr(loss_module, "_BATCHED_MACS", 16 * 16 * 32)
    loss = _loss(_mlp_critic(), n=n)
    td = _data(rows)
    routes = _traced_routes(monkeypatch)
    fn = lambda td: _values(loss, "online", td)  # noqa: E731
    if compiled:
        fn = torch.compile(fn, backend="aot_eager", fullgraph=True)
    out = fn(td)
    assert routes == (["batched"] if batched else [] if compiled else ["members"])
    stacks = list(loss.qvalue_network_params.values(True, True))
    grads = torch.autograd.grad(out.square().sum(), stacks)
    want = _member_calls(loss, "online", td)
    want_grads = torch.autograd.grad(want.square().sum(), stacks)
    torch.testing.assert_close(out, want)
    for got, expected in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("batch", [(9,), (3, 4), ()], ids=["flat", "2d", "unbatched"])
def test_a_pair_past_the_bound_runs_the_member_products_to_the_bit(monkeypatch, batch):
    """Eagerly, each member's products on its rows of the stacks: the member calls'
    additions and products in the same order, so values and gradients are equal to the
    bit, for every kind, with the inputs concatenated once for both members."""
    monkeypatch.setattr(loss_module, "_BATCHED_MACS", 0)
    loss = _loss(_mlp_critic(out_features=(2, 3), activate_last_layer=True), n=2)
    td = _data(*batch)
    action = torch.randn(*batch, 2, requires_grad=True)
    stacks = list(loss.qvalue_network_params.values(True, True))
    cats, cat = [], torch.cat
    for kind in ("online", "detached", "target"):
        params = [action, *stacks] if kind == "online" else [action]
        want = _member_calls(loss, kind, td, overrides={"action": action})
        want_grads = torch.autograd.grad(want.square().sum(), params)
        routes = _traced_routes(monkeypatch)
        with monkeypatch.context() as patch:
            _no_member_calls(patch)
            patch.setattr(torch, "cat", lambda *a, **k: cats.append(1) or cat(*a, **k))
            out = _values(loss, kind, td, overrides={"action": action})
        assert routes == ["members"] and out.shape == (2, *batch, 2, 3)
        assert torch.equal(out, want)
        for got, expected in zip(torch.autograd.grad(out.square().sum(), params), want_grads):
            assert torch.equal(got, expected)
        # the output is a fresh tensor: changing it in place leaves the backward (the
        # Tanh last saved its own output) and the next call's values alone
        out = _values(loss, kind, td, overrides={"action": action})
        out.mul_(2)
        doubled = 2 * _member_calls(loss, kind, td, overrides={"action": action})
        for got, expected in zip(
            torch.autograd.grad(out.sum(), params),
            torch.autograd.grad(doubled.sum(), params),
            strict=True,
        ):
            assert torch.equal(got, expected)
        assert torch.equal(_values(loss, kind, td, overrides={"action": action}), want)
    assert len(cats) == 3  # one concatenation of (observation, action) per call


def test_the_sac_update_is_unchanged_by_the_batched_form(monkeypatch):
    """SACLoss with MLP critics: losses and every gradient as with the member calls."""
    from tensordict.nn import NormalParamExtractor

    from rl.modules import ProbabilisticActor, TanhNormal
    from rl.objectives import SACLoss

    torch.manual_seed(0)
    actor = ProbabilisticActor(
        TensorDictModule(
            nn.Sequential(
                MLP(in_features=3, out_features=4, num_cells=[16]), NormalParamExtractor()
            ),
            ["observation"],
            ["loc", "scale"],
        ),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
    )
    loss = SACLoss(actor, _mlp_critic())
    SoftUpdate(loss, tau=0.1)
    td = _data(9)
    td["next"] = TensorDict(
        {
            "observation": torch.randn(9, 3),
            "reward": torch.randn(9, 1),
            "done": torch.zeros(9, 1, dtype=torch.bool),
            "terminated": torch.zeros(9, 1, dtype=torch.bool),
        },
        [9],
    )
    params = [p for p in loss.parameters() if p.requires_grad]
    routes = _traced_routes(monkeypatch)
    results = []
    for plan in (loss._functional["qvalue_network"]["batched"], None):
        loss._functional["qvalue_network"]["batched"] = plan
        torch.manual_seed(3)
        out = loss(td.clone())
        total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
        results.append((out.detach(), torch.autograd.grad(total, params)))
    # batched: the target, the online and the detached (actor loss) critics; then none
    assert routes == ["batched"] * 3
    (out_b, grads_b), (out_m, grads_m) = results
    for key in ("loss_actor", "loss_qvalue", "loss_alpha", "entropy"):
        torch.testing.assert_close(out_b[key], out_m[key])
    for got, want in zip(grads_b, grads_m, strict=True):
        torch.testing.assert_close(got, want)


def test_the_switch_off_runs_the_member_calls(monkeypatch):
    loss = _loss(_mlp_critic(), n=3)
    td = _data(4)
    batched = _values(loss, "online", td)
    ran = []
    for member in loss._ensemble("qvalue_network", "online")[1:]:
        member.register_forward_hook(lambda *a: ran.append(1))
    _values(loss, "online", td)
    assert ran == []  # hooks on members other than 0 are not consulted: they never run
    monkeypatch.setattr(loss_module, "_BATCHED_ENSEMBLES", False)
    torch.testing.assert_close(_values(loss, "online", td), batched)
    assert ran == [1, 1]


def test_compiled_the_member_modules_hooks_never_run(monkeypatch):
    """Compiled, the batched form calls the activations' class forward: a hook on member
    0's layers (honoured eagerly by the member calls) sees no batched tensor."""
    loss = _loss(_mlp_critic(), n=2)
    td = _data(5)
    seen = []
    loss.qvalue_network.module[1].register_forward_hook(
        lambda mod, args, out: seen.append(tuple(out.shape))
    )
    eager = _values(loss, "online", td)
    assert seen == [(5, 16)]  # eagerly: member 0 ran, its hook with it
    seen.clear()
    routes = _traced_routes(monkeypatch)
    compiled = torch.compile(
        lambda td: _values(loss, "online", td), backend="aot_eager", fullgraph=True
    )(td)
    assert routes == ["batched"] and seen == []
    torch.testing.assert_close(compiled, eager)  # a hook that changes nothing


def test_a_network_hooked_before_the_loss_was_built_has_no_plan():
    """Its hooks travel with the copies: the members run them eagerly, the compiled
    template too; the batched form, which runs no module, is not planned."""
    critic = _mlp_critic()
    critic.module[1].register_forward_hook(lambda mod, args, out: out * 0)
    loss = _loss(critic, n=2)
    assert loss._functional["qvalue_network"]["batched"] is None
    td = _data(5)
    eager = _values(loss, "online", td)
    compiled = torch.compile(
        lambda td: _values(loss, "online", td), backend="aot_eager", fullgraph=True
    )(td)
    torch.testing.assert_close(compiled, eager)
    # the hook zeroed the first hidden layer in every member: the outputs no longer
    # depend on the input rows
    torch.testing.assert_close(eager, eager[:, :1].expand_as(eager))
    assert not torch.allclose(eager[0], eager[1])  # the members keep their own weights
    patched = _mlp_critic()
    patched.module.forward = lambda *xs: torch.zeros(*xs[0].shape[:-1], 1)
    assert _loss(patched, n=2)._functional["qvalue_network"]["batched"] is None


def test_compiled_online_rows_drawn_by_index_give_the_member_calls_gradients(monkeypatch):
    loss = _loss(_mlp_critic(), n=4)
    td = _data(6)
    index = torch.tensor([3, 1, 3])
    stacks = list(loss.qvalue_network_params.values(True, True))
    routes = _traced_routes(monkeypatch)
    fn = torch.compile(
        lambda td, i: _values(loss, "online", td, index=i), backend="aot_eager", fullgraph=True
    )
    out = fn(td, index)
    assert routes == ["batched"]
    want = _member_calls(loss, "online", td, index=index)
    torch.testing.assert_close(out, want)
    grads = torch.autograd.grad(out.square().sum(), stacks)
    want_grads = torch.autograd.grad(want.square().sum(), stacks)
    for got, expected in zip(grads, want_grads, strict=True):
        torch.testing.assert_close(got, expected)
    assert grads[0][0].abs().sum() == 0 and grads[0][3].abs().sum() > 0  # undrawn: none


@pytest.mark.parametrize("route", ["members", "batched", "member_calls"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_the_minimum_over_members_is_the_minimum_of_the_stack(monkeypatch, route, n):
    # reduce="min" (SAC's target twins): each member's products folded with torch.minimum,
    # the batched form's stack reduced, or the member calls' stack reduced: the values
    # of .amin(0) of the stacked outputs, to the bit, for every kind
    loss = _loss(_mlp_critic(), n=n)
    td = _data(5)
    action = torch.randn(5, 2)
    if route == "members":
        monkeypatch.setattr(loss_module, "_BATCHED_MACS", 0)
        monkeypatch.setattr(loss_module, "_VMAP_MEMBERS", 3)
    elif route == "member_calls":
        loss._functional["qvalue_network"]["batched"] = None
    with torch.no_grad():
        for kind in ("online", "detached", "target"):
            stacked = _values(loss, kind, td, overrides={"action": action})
            least = loss._ensemble_values(
                "qvalue_network", kind, td, "state_action_value", {"action": action}, reduce="min"
            )
            assert least.shape == (5, 1)
            assert torch.equal(least, stacked.amin(0))
            if n > 1:
                assert not torch.equal(least, stacked[0])  # the members do differ

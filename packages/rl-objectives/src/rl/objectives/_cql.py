"""The Conservative Q-learning loss for continuous actions: CQLLoss (SAC + the CQL penalty).

The discrete-action loss, DiscreteCQLLoss, is in ``_cql_discrete.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn.probabilistic import InteractionType, set_interaction_type
from tensordict.utils import NestedKey
from torch import nn

from rl.core import TensorSpec

from ._actions import _action_leaf, _policy_rsample, _rsample_log_prob
from ._loss import _TD_ESTIMATORS, LossModule
from ._networks import _network_dist, _next_keys
from ._reduction import (
    _check_loss_function,
    _check_reduction,
    _loss_output,
    _reduce,
    distance_loss,
)
from ._temperature import _EntropyTemperature

__all__ = ["CQLLoss"]


def _repeat(td: TensorDictBase, keys, n: int) -> TensorDictBase:
    """``keys`` of ``td``, each row repeated ``n`` times in a row along the last batch dim."""
    dim = td.ndim - 1
    out = TensorDict(batch_size=[*td.batch_size[:-1], td.batch_size[-1] * n])
    for key in keys:
        out.set(key, td.get(key).repeat_interleave(n, dim=dim))
    return out


class CQLLoss(_EntropyTemperature, LossModule):
    r"""The Conservative Q-Learning loss on top of soft actor-critic (continuous actions).

    - ``loss_qvalue``: both critics regressed on
      ``r + gamma (1 - terminated) min_i Q_target_i(s', a')``, ``a' ~ pi(s')``
      (minus ``alpha log pi(a'|s')`` unless ``deterministic_backup``; with
      ``max_q_backup`` the max over ``num_random`` sampled ``a'``);
    - ``loss_cql``: the conservative penalty, for each critic
      ``min_q_weight * (temperature * logsumexp_a(Q(s, a) / temperature) - Q(s, a_data))``
      where the ``logsumexp`` runs over ``num_random`` uniform actions (in the action
      spec's bounds; ``[-1, 1]`` without a spec), ``num_random``
      actions of ``pi(s)`` and ``num_random`` of ``pi(s')``, all scored at ``s`` and
      importance-corrected by their densities (CQL(H) of the paper). With
      ``with_lagrange=True`` it is scaled by a learned ``alpha_prime`` that
      ``loss_alpha_prime`` tunes to keep the penalty at ``lagrange_thresh``;
    - ``loss_actor``: ``alpha log pi(a|s) - min_i Q_i(s, a)`` with the critics held out;
    - ``loss_actor_bc``: ``alpha log pi(a|s) - log pi(a_data|s)``;
    - ``loss_alpha``: the temperature loss of SAC.

    The squared TD error (max over critics) is written to the input under
    ``"td_error"``. Paper: https://arxiv.org/abs/2006.04779.

    On the same weights and random draws, ``loss_qvalue``, ``loss_actor``,
    ``loss_actor_bc``, ``loss_alpha``, ``alpha``, ``entropy`` and ``td_error`` equal
    TorchRL 0.14's. ``loss_cql`` does not, on purpose: TorchRL's ``logsumexp`` runs
    over the three proposals of each sampled action (``3`` values, not ``3 *
    num_random`` per state, so its penalty is about ``log(num_random)`` smaller) and,
    with ``with_lagrange``, neither scales the penalty by ``alpha_prime`` nor detaches
    it in ``loss_alpha_prime``. Here both follow the paper and its authors' code (as
    CORL and d3rlpy do). TorchRL also draws the uniform actions in ``[-1, 1]`` whatever
    the spec; here they fill the spec's box (Pendulum's ``[-2, 2]``), else actions past
    ``1`` are never pushed down and the actor drifts there.

    Args:
        actor_network (ProbabilisticTensorDictSequential): a stochastic actor over
            actions in ``[-1, 1]`` (e.g. :class:`~rl.modules.TanhNormal`).
        qvalue_network (TensorDictModule): reads the observation and ``action``, writes
            ``state_action_value``; copied into two critics.

    Keyword Args:
        loss_function (str): ``"smooth_l1"`` (default), ``"l2"`` or ``"l1"``.
        alpha_init (float): initial entropy temperature. Defaults to 1.0.
        min_alpha, max_alpha (float, optional): bounds of the temperature.
        action_spec (TensorSpec, optional): for ``target_entropy="auto"`` and the box
            of the penalty's uniform actions (else the actor's spec is read).
        fixed_alpha (bool): keep the temperature at ``alpha_init``. Defaults to ``False``.
        target_entropy (float or "auto"): defaults to ``"auto"`` (minus the action size).
        delay_actor (bool): sample next actions from a target actor. Defaults to ``False``.
        delay_qvalue (bool): keep target critics. Defaults to ``True``.
        gamma (float, optional): discount for the value estimator.
        temperature (float): temperature of the ``logsumexp``. Defaults to 1.0.
        min_q_weight (float): weight of the penalty. Defaults to 1.0.
        max_q_backup (bool): back up the max over ``num_random`` next actions.
            Defaults to ``False``.
        deterministic_backup (bool): leave the entropy term out of the target.
            Defaults to ``True``.
        num_random (int): actions sampled per state for the penalty. Defaults to 10.
        with_lagrange (bool): learn the penalty weight. Defaults to ``False``.
        lagrange_thresh (float): target size of the penalty. Defaults to 0.0.
        reduction (str, optional): ``"mean"`` (default), ``"sum"`` or ``"none"``.
        deactivate_vmap (bool): accepted for compatibility.
        scalar_output_mode (str, optional): with ``reduction="none"``, ``"exclude"``
            (default) or ``"non_tensor"`` for ``alpha`` and ``entropy``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import NormalParamExtractor, TensorDictModule
        >>> from rl.core import Bounded
        >>> from rl.modules import ProbabilisticActor, TanhNormal, ValueOperator
        >>> from rl.objectives import CQLLoss
        >>> actor = ProbabilisticActor(
        ...     TensorDictModule(
        ...         torch.nn.Sequential(torch.nn.Linear(3, 4), NormalParamExtractor()),
        ...         ["observation"], ["loc", "scale"],
        ...     ),
        ...     in_keys=["loc", "scale"],
        ...     spec=Bounded(-1.0, 1.0, (2,)),
        ...     distribution_class=TanhNormal,
        ... )
        >>> class QNet(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.linear = torch.nn.Linear(5, 1)
        ...     def forward(self, obs, act):
        ...         return self.linear(torch.cat([obs, act], -1))
        >>> qvalue = ValueOperator(QNet(), in_keys=["observation", "action"])
        >>> loss = CQLLoss(actor, qvalue, num_random=4, gamma=0.99)
        >>> data = TensorDict(
        ...     observation=torch.randn(5, 3),
        ...     action=torch.rand(5, 2) * 1.8 - 0.9,
        ...     next=TensorDict(
        ...         observation=torch.randn(5, 3),
        ...         reward=torch.randn(5, 1),
        ...         done=torch.zeros(5, 1, dtype=torch.bool),
        ...         terminated=torch.zeros(5, 1, dtype=torch.bool),
        ...         batch_size=[5],
        ...     ),
        ...     batch_size=[5],
        ... )
        >>> sorted(loss(data).keys())
        ['alpha', 'entropy', 'loss_actor', 'loss_actor_bc', 'loss_alpha', 'loss_cql', 'loss_qvalue']
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by CQLLoss.

        Attributes:
            action: the dataset action (``"action"``).
            value: forwarded to the value estimator (``"state_value"``).
            state_action_value: the critics' output (``"state_action_value"``).
            log_prob: log-probability entry of the actor's metadata (``"_log_prob"``).
            pred_q1, pred_q2: where the critics' predictions are written.
            priority: where the TD error is written (``"td_error"``).
            cql_q1_loss, cql_q2_loss: where the per-sample penalties are written.
            reward, done, terminated: read under ``"next"``.
        """

        action: NestedKey = "action"
        value: NestedKey = "state_value"
        state_action_value: NestedKey = "state_action_value"
        log_prob: NestedKey = "_log_prob"
        pred_q1: NestedKey = "pred_q1"
        pred_q2: NestedKey = "pred_q2"
        priority: NestedKey = "td_error"
        cql_q1_loss: NestedKey = "cql_q1_loss"
        cql_q2_loss: NestedKey = "cql_q2_loss"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"

    default_value_estimator = "TD0"
    SUPPORTED_VALUE_ESTIMATORS = _TD_ESTIMATORS
    _target_entropy_hint = "pass target_entropy=... or action_spec=..., or give the actor a spec"

    def __init__(
        self,
        actor_network: nn.Module,
        qvalue_network: nn.Module,
        *,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "smooth_l1",
        alpha_init: float = 1.0,
        min_alpha: float | None = None,
        max_alpha: float | None = None,
        action_spec: TensorSpec | None = None,
        fixed_alpha: bool = False,
        target_entropy: str | float = "auto",
        delay_actor: bool = False,
        delay_qvalue: bool = True,
        gamma: float | None = None,
        temperature: float = 1.0,
        min_q_weight: float = 1.0,
        max_q_backup: bool = False,
        deterministic_backup: bool = True,
        num_random: int = 10,
        with_lagrange: bool = False,
        lagrange_thresh: float = 0.0,
        reduction: Literal["mean", "sum", "none"] | None = None,
        deactivate_vmap: bool = False,
        scalar_output_mode: Literal["exclude", "non_tensor"] | None = None,
    ) -> None:
        super().__init__()
        if num_random < 1:
            raise ValueError(f"num_random must be >= 1, got {num_random}")
        self.loss_function = _check_loss_function(loss_function)
        self.reduction = _check_reduction("mean" if reduction is None else reduction)
        self.scalar_output_mode = scalar_output_mode or "exclude"
        self.deactivate_vmap = deactivate_vmap
        self.delay_actor = delay_actor
        self.delay_qvalue = delay_qvalue
        self.num_qvalue_nets = 2
        self.gamma = gamma
        self.temperature = temperature
        self.min_q_weight = min_q_weight
        self.max_q_backup = max_q_backup
        self.deterministic_backup = deterministic_backup
        self.num_random = num_random
        self.with_lagrange = with_lagrange
        self.convert_to_functional(actor_network, "actor_network", create_target_params=delay_actor)
        self.convert_to_functional(
            qvalue_network,
            "qvalue_network",
            expand_dim=self.num_qvalue_nets,
            create_target_params=delay_qvalue,
            compare_against=list(actor_network.parameters()),
        )
        self._action_spec = action_spec
        auto = self._action_entropy_target(action_spec, actor_network)
        self._init_temperature(alpha_init, min_alpha, max_alpha, fixed_alpha, target_entropy, auto)
        if with_lagrange:
            self.target_action_gap = lagrange_thresh
            self.log_alpha_prime = nn.Parameter(torch.tensor(0.0))
        self._set_in_keys()

    # ------------------------------------------------------------------ keys
    def _set_in_keys(self) -> None:
        tk = self.tensor_keys
        actor_keys = list(getattr(self.actor_network, "in_keys", []))
        q_keys = list(getattr(self.qvalue_network, "in_keys", []))
        keys = [tk.action, *_next_keys([tk.reward, tk.done, tk.terminated])]
        keys += [*actor_keys, *_next_keys(actor_keys), *q_keys]
        self.in_keys = list(dict.fromkeys(keys))
        self.out_keys = [
            "loss_actor",
            "loss_actor_bc",
            "loss_qvalue",
            "loss_cql",
            "loss_alpha",
            "alpha",
            "entropy",
        ] + (["loss_alpha_prime"] if self.with_lagrange else [])
        self._in_keys_extra = list(dict.fromkeys(actor_keys + q_keys + _next_keys(actor_keys)))
        try:  # decided before any call, compiled or not
            self._spec_bounds()
        except ValueError:  # an unusable spec is reported by the call that needs it
            pass

    def _required_key_names(self):
        return ("action",)

    # ---------------------------------------------------------------- pieces
    def _policy(self, kind: str = "online") -> nn.Module:
        if kind == "target":
            return self._target_network("actor_network")
        if kind == "detached":
            return self._detached_network("actor_network")
        return self.actor_network

    def _q(self, tensordict: TensorDictBase, kind: str) -> torch.Tensor:
        """``Q_i(s, a)`` of both critics, ``[2, *B, 1]``."""
        return self._ensemble_values(
            "qvalue_network", kind, tensordict, self.tensor_keys.state_action_value
        )

    def _policy_actions(self, tensordict: TensorDictBase, kind: str):
        """``num_random`` actions per state: ``(td [*B[:-1], B*n], log_prob [*B[:-1], B*n])``."""
        keys = list(getattr(self.actor_network, "in_keys", []))
        repeated = _repeat(tensordict, keys, self.num_random)
        action, log_prob = _policy_rsample(self._policy(kind), repeated)
        repeated.set(self.tensor_keys.action, action)
        return repeated, log_prob

    def _target_value(self, tensordict: TensorDictBase) -> torch.Tensor:
        actor_kind = "target" if self.delay_actor else "detached"
        next_td = tensordict.get("next").copy()
        with torch.no_grad():
            action, log_prob = _policy_rsample(self._policy(actor_kind), next_td)
            next_td.set(self.tensor_keys.action, action)
            if not self.max_q_backup:
                next_value = self._q(next_td, "target").min(0).values
                if not self.deterministic_backup:
                    next_value = next_value - self._alpha * log_prob.unsqueeze(-1)
            else:
                many, _ = self._policy_actions(tensordict.get("next"), actor_kind)
                q = self._q(many, "target")
                q = q.reshape(self.num_qvalue_nets, *tensordict.shape, self.num_random, -1)
                next_value = q.max(-2).values.min(0).values
            return self._value_target(tensordict, next_value).squeeze(-1)

    def q_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """Soft Bellman regression of both critics; writes ``pred_q1``/``pred_q2``."""
        target = self._target_value(tensordict)
        pred = self._q(tensordict, "online")
        tensordict.set(self.tensor_keys.pred_q1, pred[0])
        tensordict.set(self.tensor_keys.pred_q2, pred[1])
        pred = pred.squeeze(-1)
        loss = distance_loss(pred, target.expand_as(pred), self.loss_function).sum(0)
        td_error = (pred.detach() - target).pow(2)
        return _reduce(loss, self.reduction, None), {"td_error": td_error}

    def cql_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """The conservative penalty; needs ``pred_q1``/``pred_q2`` from :meth:`q_loss`."""
        pred_q1 = tensordict.get(self.tensor_keys.pred_q1, None)
        pred_q2 = tensordict.get(self.tensor_keys.pred_q2, None)
        if pred_q1 is None or pred_q2 is None:
            raise KeyError(
                f"{type(self).__name__}.cql_loss needs {self.tensor_keys.pred_q1!r} and "
                f"{self.tensor_keys.pred_q2!r} in the input: call q_loss first"
            )
        n = self.num_random
        action = self._get(tensordict, "action")
        batch = tensordict.shape
        random_actions = action.new_empty((*batch[:-1], batch[-1] * n, action.shape[-1])).uniform_(
            -1, 1
        )
        random_density = math.log(0.5 ** action.shape[-1])
        bounds = self._action_bounds(action)
        if bounds is not None:  # uniform over the spec's box, not over [-1, 1]
            low, high = bounds
            random_actions = low + (random_actions + 1) * ((high - low) / 2)
            random_density = -torch.log(high - low).expand(action.shape[-1:]).sum()
        with torch.no_grad():
            curr_td, curr_log_pi = self._policy_actions(tensordict, "detached")
            next_td, next_log_pi = self._policy_actions(tensordict.get("next"), "detached")
        # Every sampled action is scored at the current state s (CQL paper, eq. 4).
        q_keys = [k for k in self.qvalue_network.in_keys if k != self.tensor_keys.action]
        at_s = _repeat(tensordict, q_keys, n)
        stacked = torch.cat(
            [
                at_s.clone(False).set(self.tensor_keys.action, random_actions),
                at_s.clone(False).set(
                    self.tensor_keys.action, curr_td.get(self.tensor_keys.action)
                ),
                at_s.clone(False).set(
                    self.tensor_keys.action, next_td.get(self.tensor_keys.action)
                ),
            ],
            dim=-1,
        )
        q = self._q(stacked, "online").squeeze(-1)  # [2, *B[:-1], 3 * B * n]
        q_rand, q_curr, q_next = q.chunk(3, dim=-1)
        shape = (self.num_qvalue_nets, *batch, n)
        cat = torch.cat(
            [
                q_rand.reshape(shape) - random_density,
                q_next.reshape(shape) - next_log_pi.reshape(shape[1:]),
                q_curr.reshape(shape) - curr_log_pi.reshape(shape[1:]),
            ],
            dim=-1,
        )
        lse = torch.logsumexp(cat / self.temperature, dim=-1) * self.temperature
        pred = torch.stack([pred_q1, pred_q2]).squeeze(-1)
        cql = (lse - pred) * self.min_q_weight  # [2, *B]
        tensordict.set(self.tensor_keys.cql_q1_loss, cql[0])
        tensordict.set(self.tensor_keys.cql_q2_loss, cql[1])
        penalty = cql.sum(0)
        if self.with_lagrange:
            penalty = self._alpha_prime * penalty
        return _reduce(penalty, self.reduction, None), {}

    def _action_bounds(self, action: torch.Tensor):
        """``(low, high)`` of the action spec (``action_spec``, else the actor's), or
        ``None`` where there is none or it is ``[-1, 1]``, or where the actor's spec (no
        ``action_spec`` given) is unbounded: TorchRL's ``[-1, 1]`` then, as for a
        ``TanhNormal`` actor declared with an ``Unbounded`` spec.

        The decision reads the spec's tensors: it is made once per spec and action key
        (:meth:`_set_in_keys` primes it), so that a compiled update traces no branch on
        data."""
        low_high = self._spec_bounds()
        if low_high is None:
            return None
        low, high = low_high
        return low.to(device=action.device, dtype=action.dtype), high.to(
            device=action.device, dtype=action.dtype
        )

    def _spec_bounds(self):
        """The spec's ``(low, high)`` of one action (on the spec's device), or ``None``;
        cached per spec object and action key (a new spec, e.g. ``loss._action_spec =
        ...``, is read again; bounds edited in place keep the cached decision, while the
        cached ``low`` / ``high`` views follow their values)."""
        spec = self._action_spec
        explicit = spec is not None
        if spec is None:
            spec = getattr(self.actor_network, "spec", None)
        key = (spec, self.tensor_keys.action)
        cached = self.__dict__.get("_spec_bounds_cache")
        if cached is not None and cached[0][0] is spec and cached[0][1] == key[1]:
            return cached[1]
        leaf, _ = _action_leaf(spec, self.tensor_keys.action)
        space = getattr(leaf, "space", None)
        low, high = getattr(space, "low", None), getattr(space, "high", None)
        bounds = None
        if isinstance(low, torch.Tensor) and isinstance(high, torch.Tensor):
            low = low.detach().reshape(-1, low.shape[-1])[0]
            high = high.detach().reshape(-1, high.shape[-1])[0]
            if not bool((low == -1).all() and (high == 1).all()):
                if torch.isfinite(high - low).all():
                    bounds = (low, high)
                elif explicit:
                    raise ValueError(
                        f"{type(self).__name__} draws uniform actions in the action spec's "
                        f"bounds, which must be finite; got low={low.tolist()}, "
                        f"high={high.tolist()}"
                    )
        self.__dict__["_spec_bounds_cache"] = (key, bounds)
        return bounds

    @property
    def _alpha_prime(self) -> torch.Tensor:
        return self.log_alpha_prime.detach().exp().clamp_max(1e6)

    def alpha_prime_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """Lagrange-multiplier loss; trains ``log_alpha_prime`` only."""
        q1 = tensordict.get(self.tensor_keys.cql_q1_loss, None)
        q2 = tensordict.get(self.tensor_keys.cql_q2_loss, None)
        if q1 is None or q2 is None:
            raise KeyError(
                f"{type(self).__name__}.alpha_prime_loss needs {self.tensor_keys.cql_q1_loss!r} "
                f"and {self.tensor_keys.cql_q2_loss!r} in the input: call cql_loss first"
            )
        alpha_prime = self.log_alpha_prime.exp().clamp_max(1e6)
        gap = self.target_action_gap
        loss = -0.5 * alpha_prime * ((q1.detach().mean() - gap) + (q2.detach().mean() - gap))
        return loss, {}

    def actor_bc_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """``alpha log pi(a|s) - log pi(a_data|s)``; returns ``(loss, metadata)``."""
        with set_interaction_type(InteractionType.RANDOM):
            dist = _network_dist(self.actor_network, tensordict)
            _, log_prob = _rsample_log_prob(dist)
        bc_log_prob = dist.log_prob(self._get(tensordict, "action"))
        loss = self._alpha * log_prob - bc_log_prob
        return _reduce(loss, self.reduction, None), {"bc_log_prob": bc_log_prob.mean().detach()}

    def actor_loss(self, tensordict: TensorDictBase) -> tuple[torch.Tensor, dict]:
        """``alpha log pi(a|s) - min_i Q_i(s, a)`` with the critics held out."""
        action, log_prob = _policy_rsample(self.actor_network, tensordict)
        td_q = tensordict.select(*self.qvalue_network.in_keys, strict=False)
        td_q.set(self.tensor_keys.action, action)
        min_q = self._q(td_q, "detached").min(0).values.squeeze(-1)
        if log_prob.shape != min_q.shape:
            raise RuntimeError(
                f"{type(self).__name__}: log_prob has shape {tuple(log_prob.shape)} but the "
                f"critics give {tuple(min_q.shape)}; they must match"
            )
        loss = self._alpha * log_prob - min_q
        return _reduce(loss, self.reduction, None), {self.tensor_keys.log_prob: log_prob.detach()}

    def alpha_loss(self, metadata: dict) -> tuple[torch.Tensor, dict]:
        """The temperature loss from the actor's log-probabilities."""
        loss = self._alpha_loss(metadata[self.tensor_keys.log_prob])
        return _reduce(loss, self.reduction, None), {}

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute every CQL loss on a batch of transitions; writes ``td_error`` into it.

        Returns:
            a TensorDict with ``loss_actor``, ``loss_actor_bc``, ``loss_qvalue``,
            ``loss_cql``, ``loss_alpha``, ``alpha``, ``entropy`` (and
            ``loss_alpha_prime`` with ``with_lagrange=True``).
        """
        self._get(tensordict, "action")
        q_loss, metadata = self.q_loss(tensordict)
        cql_loss, _ = self.cql_loss(tensordict)
        scalars = {}
        if self.with_lagrange:  # a scalar: kept as non-tensor data with reduction="none"
            scalars["loss_alpha_prime"] = self.alpha_prime_loss(tensordict)[0]
        loss_actor_bc, _ = self.actor_bc_loss(tensordict)
        loss_actor, actor_metadata = self.actor_loss(tensordict)
        loss_alpha, _ = self.alpha_loss(actor_metadata)
        tensordict.set(self.tensor_keys.priority, metadata["td_error"].max(0).values)
        scalars["alpha"] = self._alpha
        scalars["entropy"] = -actor_metadata[self.tensor_keys.log_prob].mean()
        losses = {
            "loss_actor": loss_actor,
            "loss_actor_bc": loss_actor_bc,
            "loss_qvalue": q_loss,
            "loss_cql": cql_loss,
            "loss_alpha": loss_alpha,
        }
        return _loss_output(
            losses,
            scalars,
            reduction=self.reduction,
            scalar_output_mode=self.scalar_output_mode,
            batch_size=tensordict.batch_size,
            kept=("loss_alpha_prime",),
        )

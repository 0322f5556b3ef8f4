"""QMixerLoss: cooperative multi-agent Q-learning through a value mixer (QMIX, VDN).

Rashid et al., 2018, "QMIX: Monotonic Value Function Factorisation for Deep Multi-Agent
Reinforcement Learning", https://arxiv.org/abs/1803.11485; Sunehag et al., 2017,
"Value-Decomposition Networks For Cooperative Multi-Agent Learning",
https://arxiv.org/abs/1706.05296.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from tensordict.utils import NestedKey
from torch import nn

from rl.core import TensorSpec

from ._actions import _find_action_space, _resolve_space, _select
from ._loss import _TD_ESTIMATORS, LossModule
from ._networks import _network_output, _next_keys
from ._reduction import _check_loss_function, distance_loss

__all__ = ["QMixerLoss"]


class QMixerLoss(LossModule):
    """The QMIX / VDN loss: DQN on the mixture of the agents' local Q-values.

    The local value network writes every agent's action values (``[*B, n_agents,
    n_actions]`` under ``tensor_keys.action_value``). The values of the taken actions
    (``tensor_keys.local_value``, ``[*B, n_agents, 1]``) go through the mixer, which
    writes the global value ``Q_tot`` (``tensor_keys.global_value``, ``[*B, 1]``). The
    target is ``r + gamma * (1 - terminated) * Q_tot'(s')``, where ``Q_tot'`` mixes, with
    the target mixer, the target local network's greedy values ``max_a Q_i'(o_i', a)``
    (TD(0) by default; see :meth:`make_value_estimator`). The reward and done flags are
    global (``[*B, 1]``, shared by the team). The squared TD error is written to the input
    under ``tensor_keys.priority`` for prioritized replay.

    Args:
        local_value_network (TensorDictModule): the agents' Q network, e.g.
            ``TensorDictSequential(TensorDictModule(MultiAgentMLP(...), ...), QValueModule(...))``;
            it must write ``tensor_keys.action_value``.
        mixer_network (TensorDictModule or nn.Module): the mixer, e.g. a
            ``TensorDictModule`` around :class:`~rl.modules.QMixer` or
            :class:`~rl.modules.VDNMixer` reading ``local_value`` (and a state) and writing
            ``global_value``. A plain module is wrapped with those two keys.

    Keyword Args:
        loss_function (str): ``"l2"`` (default), ``"l1"`` or ``"smooth_l1"``.
        delay_value (bool): keep target copies of both networks, updated by
            :class:`~rl.objectives.SoftUpdate` or :class:`~rl.objectives.HardUpdate`.
            Defaults to ``True``.
        gamma (float, optional): discount of the value estimator (TorchRL rejects it here
            and asks for ``make_value_estimator(gamma=...)``; both work). Defaults to 0.99.
        action_space (str or TensorSpec, optional): ``"one-hot"`` or ``"categorical"`` or
            a spec (a Composite is searched for ``tensor_keys.action``); read from the
            local network's ``action_space`` / ``spec`` when ``None``, else from the data.
        priority_key (NestedKey, optional): shortcut for ``set_keys(priority=...)``.

    Raises:
        TypeError: if ``local_value_network`` is not a TensorDict module.
        ValueError: on an unknown ``loss_function`` or ``action_space``, or in ``forward``
            when the mixer does not return one value per sample.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import MultiAgentMLP, QValueModule, TensorDictModule, TensorDictSequential, VDNMixer
        >>> from rl.objectives import QMixerLoss
        >>> n_agents, n_actions = 2, 3
        >>> qnet = TensorDictSequential(
        ...     TensorDictModule(
        ...         MultiAgentMLP(4, n_actions, n_agents, centralized=False, share_params=True, depth=1, num_cells=8),
        ...         in_keys=[("agents", "observation")], out_keys=[("agents", "action_value")],
        ...     ),
        ...     QValueModule(
        ...         action_space="categorical", action_value_key=("agents", "action_value"),
        ...         out_keys=[("agents", "action"), ("agents", "action_value"), ("agents", "chosen_action_value")],
        ...     ),
        ... )
        >>> mixer = TensorDictModule(
        ...     VDNMixer(n_agents, device="cpu"), in_keys=[("agents", "chosen_action_value")], out_keys=["chosen_action_value"]
        ... )
        >>> loss = QMixerLoss(qnet, mixer, action_space="categorical", gamma=0.9)
        >>> agents = lambda: TensorDict(observation=torch.randn(5, n_agents, 4), batch_size=[5, n_agents])
        >>> data = TensorDict(
        ...     agents=agents(),
        ...     next=TensorDict(
        ...         agents=agents(), reward=torch.ones(5, 1),
        ...         done=torch.zeros(5, 1, dtype=torch.bool), terminated=torch.zeros(5, 1, dtype=torch.bool),
        ...         batch_size=[5],
        ...     ),
        ...     batch_size=[5],
        ... )
        >>> data = qnet(data)
        >>> loss(data)["loss"].shape, data["td_error"].shape
        (torch.Size([]), torch.Size([5, 1]))
    """

    @dataclass
    class _AcceptedKeys:
        """Keys read and written by QMixerLoss; remap them with ``set_keys``.

        Attributes:
            advantage, value_target: forwarded to the value estimator.
            local_value: the agents' chosen-action values, the mixer's input
                (``("agents", "chosen_action_value")``).
            global_value: the mixer's output (``"chosen_action_value"``).
            action_value: the local network's action values (``("agents", "action_value")``).
            action: the agents' actions (``("agents", "action")``).
            priority: where the squared TD error is written (``"td_error"``).
            reward, done, terminated: the team's entries, read under ``"next"``.
        """

        advantage: NestedKey = "advantage"
        value_target: NestedKey = "value_target"
        local_value: NestedKey = ("agents", "chosen_action_value")
        global_value: NestedKey = "chosen_action_value"
        action_value: NestedKey = ("agents", "action_value")
        action: NestedKey = ("agents", "action")
        priority: NestedKey = "td_error"
        reward: NestedKey = "reward"
        done: NestedKey = "done"
        terminated: NestedKey = "terminated"

    default_value_estimator = "TD0"
    SUPPORTED_VALUE_ESTIMATORS = _TD_ESTIMATORS

    def __init__(
        self,
        local_value_network: TensorDictModuleBase,
        mixer_network: TensorDictModuleBase | nn.Module,
        *,
        loss_function: Literal["l2", "l1", "smooth_l1"] = "l2",
        delay_value: bool = True,
        gamma: float | None = None,
        action_space: str | TensorSpec | None = None,
        priority_key: NestedKey | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(local_value_network, TensorDictModuleBase):
            raise TypeError(
                "QMixerLoss needs a TensorDict module as local_value_network (writing "
                f"{self.tensor_keys.action_value!r}), got {type(local_value_network).__name__}"
            )
        _check_loss_function(loss_function)
        if not isinstance(mixer_network, TensorDictModuleBase):
            mixer_network = TensorDictModule(
                mixer_network,
                in_keys=[self.tensor_keys.local_value],
                out_keys=[self.tensor_keys.global_value],
            )
        self.loss_function = loss_function
        self.delay_value = delay_value
        self.gamma = gamma
        self._action_space_arg = action_space
        self.action_space = _find_action_space(
            action_space, local_value_network, ("agents", "action")
        )
        self.convert_to_functional(
            local_value_network, "local_value_network", create_target_params=delay_value
        )
        self.convert_to_functional(mixer_network, "mixer_network", create_target_params=delay_value)
        if priority_key is not None:
            self.set_keys(priority=priority_key)
        self._set_in_keys()

    # ------------------------------------------------------------------- keys
    _value_estimator_key_names = {"value": "global_value"}

    def _forward_value_estimator_keys(self, **kwargs) -> None:
        super()._forward_value_estimator_keys(**kwargs)
        if "action" in kwargs and self._action_space_arg is None:
            self.action_space = _find_action_space(
                None, self.local_value_network, self.tensor_keys.action
            )

    def _set_in_keys(self) -> None:
        tk = self.tensor_keys
        net_keys = list(self.local_value_network.in_keys)
        produced = {tk.local_value, *self.local_value_network.out_keys}
        mixer_keys = [k for k in self.mixer_network.in_keys if k not in produced]
        obs = list(dict.fromkeys([*net_keys, *mixer_keys]))
        nxt = _next_keys([tk.reward, tk.done, tk.terminated, *obs])
        self.in_keys = list(dict.fromkeys([tk.action, *obs, *nxt]))
        self.out_keys = ["loss"]
        self._in_keys_extra = obs

    def _required_key_names(self) -> tuple[str, ...]:
        return ("action",)

    # ------------------------------------------------------------------ pieces
    def _chosen(self, values: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """The values of the taken actions, ``[*B, n_agents, 1]``."""
        space = _resolve_space(self.action_space, action, values)
        return _select(values, action, space).unsqueeze(-1)

    def _mix(self, mixer: nn.Module, tensordict: TensorDictBase, local: torch.Tensor):
        tk = self.tensor_keys
        value = _network_output(mixer, tensordict, tk.global_value, {tk.local_value: local})
        if value.shape[-1:] != (1,) or value.shape[:-1] != local.shape[:-2]:
            raise ValueError(
                f"the mixer must write {tk.global_value!r} of shape [*B, 1] = "
                f"{(*local.shape[:-2], 1)}, got {tuple(value.shape)}"
            )
        return value

    def _next_global_value(self, next_td: TensorDictBase) -> torch.Tensor:
        """``Q_tot'(s')``: the target mixer over ``max_a Q_i'(o_i', a)``, ``[*B, 1]``."""
        key = self.tensor_keys.action_value
        with torch.no_grad():
            local_net = self._target_network("local_value_network")
            values = _network_output(local_net, next_td, key)
            best = values.max(-1, keepdim=True).values
            return self._mix(self._target_network("mixer_network"), next_td, best)

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        """Compute the loss on a batch of transitions; writes the TD error into it.

        Args:
            tensordict (TensorDictBase): ``[*B]`` transitions with the networks' inputs,
                the agents' actions and ``("next", ...)`` observations, reward, done and
                terminated (global ones, ``[*B, 1]``).

        Returns:
            a TensorDict with ``loss``.
        """
        tk = self.tensor_keys
        action = self._get(tensordict, "action")
        values = _network_output(self.local_value_network, tensordict, tk.action_value)
        local = self._chosen(values, action)
        pred = self._mix(self.mixer_network, tensordict, local).squeeze(-1)
        next_value = self._next_global_value(tensordict.get("next"))
        reward = self._get(tensordict, "reward", "next")
        if reward.shape != next_value.shape:
            raise ValueError(
                f"QMixerLoss needs a global reward {tk.reward!r} of shape [*B, 1] = "
                f"{tuple(next_value.shape)}, got {tuple(reward.shape)} (average or sum the "
                "agents' rewards first)"
            )
        target = self._value_target(tensordict, next_value).squeeze(-1)
        with torch.no_grad():
            priority = (pred - target).pow(2).unsqueeze(-1)
        tensordict.set(tk.priority, priority, inplace=True)
        loss = distance_loss(pred, target, self.loss_function)
        return TensorDict(loss=loss.mean())

"""TD(0), TD(1), TD(lambda) and GAE estimator modules over rl.objectives.value.functional."""

from __future__ import annotations

import functools
import warnings

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from tensordict.utils import expand_as_right

from rl.objectives.value._base import ValueEstimatorBase, _next_key, _standardize
from rl.objectives.value.functional import (
    td0_return_estimate,
    vec_generalized_advantage_estimate,
    vec_td_lambda_return_estimate,
)

__all__ = [
    "GAE",
    "TD0Estimate",
    "TD0Estimator",
    "TD1Estimate",
    "TD1Estimator",
    "TDLambdaEstimate",
    "TDLambdaEstimator",
]


class _RewardNormalizing(ValueEstimatorBase):
    average_rewards: bool = False
    _reward_eps: float = 1e-5  # the smallest std the rewards are divided by (TorchRL's)

    def _rewards(
        self, tensordict: TensorDictBase
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        reward, done, terminated = self._signals(tensordict)
        if self.average_rewards:
            reward = _standardize(reward, self._reward_eps, self._group_ids(tensordict))
            # later readers of the batch (a loss) see the rewards the targets used
            tensordict.set(_next_key(self.tensor_keys.reward), reward)
        return reward, done, terminated


class TD0Estimator(_RewardNormalizing):
    """One-step TD target ``r + gamma * (1 - terminated) * V(s')``, advantage ``target - V(s)``.

    Keyword Args:
        gamma (float or Tensor): discount.
        value_network (TensorDictModule or None): the critic; ``None`` reads
            ``("next", value)`` (and ``value``) from the input.
        shifted, differentiable, skip_existing, advantage_key, value_target_key,
        value_key, device, deactivate_vmap, shifted_budget, group_key: see
        :class:`ValueEstimatorBase`.
        average_rewards (bool): standardize the rewards before use (within the groups of
            ``group_key`` when given). Defaults to ``False``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> value_net = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["obs"], out_keys=["state_value"])
        >>> module = TD0Estimator(gamma=0.98, value_network=value_net)
        >>> obs, next_obs = torch.randn(2, 1, 10, 3)
        >>> flags = torch.zeros(1, 10, 1, dtype=torch.bool)
        >>> td = TensorDict(
        ...     {"obs": obs, "next": {"obs": next_obs, "reward": torch.randn(1, 10, 1), "done": flags, "terminated": flags}},
        ...     [1, 10],
        ... )
        >>> module(td)["advantage"].shape
        torch.Size([1, 10, 1])
    """

    def __init__(
        self,
        *,
        gamma: float | torch.Tensor,
        value_network: TensorDictModuleBase | None,
        shifted: bool = False,
        average_rewards: bool = False,
        differentiable: bool = False,
        advantage_key=None,
        value_target_key=None,
        value_key=None,
        skip_existing: bool | None = None,
        device: torch.device | None = None,
        deactivate_vmap: bool = False,
        value_chunk_size: int | None = None,
        num_chunks: int | None = None,
        num_chunk: int | None = None,
        value_chunk_dim: int = 0,
        shifted_budget: int = 1,
        group_key=None,
        time_dim: int | None = None,
    ) -> None:
        super().__init__(
            value_network=value_network,
            shifted=shifted,
            differentiable=differentiable,
            skip_existing=skip_existing,
            advantage_key=advantage_key,
            value_target_key=value_target_key,
            value_key=value_key,
            device=device,
            deactivate_vmap=deactivate_vmap,
            value_chunk_size=value_chunk_size,
            num_chunks=num_chunks,
            num_chunk=num_chunk,
            value_chunk_dim=value_chunk_dim,
            shifted_budget=shifted_budget,
            group_key=group_key,
            time_dim=time_dim,
        )
        self.register_buffer("gamma", torch.as_tensor(gamma, device=self._device).clone())
        self.average_rewards = average_rewards

    def _time_dim(self, tensordict, time_dim):
        # TD(0) is per step: any batch shape, even without a time dimension
        if tensordict.batch_dims == 0:
            return 0
        return super()._time_dim(tensordict, time_dim)

    def _target(self, tensordict, next_value, time_dim):
        reward, _, terminated = self._rewards(tensordict)
        gamma = self._gamma(tensordict, reward)
        return td0_return_estimate(gamma, next_value.to(reward.dtype), reward, terminated)


class TDLambdaEstimator(_RewardNormalizing):
    r"""TD(:math:`\lambda`) target (bootstrapped at truncation and at the batch end).

    Keyword Args:
        gamma (float or Tensor): discount.
        lmbda (float or Tensor): trace decay in ``[0, 1]`` (``0``: TD(0), ``1``: TD(1)).
        value_network (TensorDictModule or None): the critic; ``None`` reads the values
            from the input.
        average_rewards (bool): standardize the rewards before use. Defaults to ``False``.
        vectorized (bool): accepted for TorchRL compatibility; always vectorized here.
        shifted, differentiable, skip_existing, advantage_key, value_target_key,
        value_key, device, deactivate_vmap, time_dim, shifted_budget, group_key: see
        :class:`ValueEstimatorBase`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> flags = torch.zeros(1, 3, 1, dtype=torch.bool)
        >>> td = TensorDict({"state_value": torch.zeros(1, 3, 1), "next": {
        ...     "reward": torch.ones(1, 3, 1), "done": flags, "terminated": flags,
        ...     "state_value": torch.zeros(1, 3, 1)}}, [1, 3])
        >>> TDLambdaEstimator(gamma=0.5, lmbda=1.0, value_network=None)(td)["value_target"].flatten()
        tensor([1.7500, 1.5000, 1.0000])
    """

    def __init__(
        self,
        *,
        gamma: float | torch.Tensor,
        lmbda: float | torch.Tensor,
        value_network: TensorDictModuleBase | None,
        average_rewards: bool = False,
        differentiable: bool = False,
        vectorized: bool = True,
        skip_existing: bool | None = None,
        advantage_key=None,
        value_target_key=None,
        value_key=None,
        shifted: bool = False,
        device: torch.device | None = None,
        time_dim: int | None = None,
        auto_reset_env: bool = False,
        deactivate_vmap: bool = False,
        value_chunk_size: int | None = None,
        num_chunks: int | None = None,
        num_chunk: int | None = None,
        value_chunk_dim: int = 0,
        shifted_budget: int = 1,
        group_key=None,
    ) -> None:
        super().__init__(
            value_network=value_network,
            shifted=shifted,
            differentiable=differentiable,
            skip_existing=skip_existing,
            advantage_key=advantage_key,
            value_target_key=value_target_key,
            value_key=value_key,
            device=device,
            deactivate_vmap=deactivate_vmap,
            value_chunk_size=value_chunk_size,
            num_chunks=num_chunks,
            num_chunk=num_chunk,
            value_chunk_dim=value_chunk_dim,
            shifted_budget=shifted_budget,
            group_key=group_key,
            time_dim=time_dim,
        )
        self.register_buffer("gamma", torch.as_tensor(gamma, device=self._device).clone())
        self.register_buffer("lmbda", torch.as_tensor(lmbda, device=self._device).clone())
        self.average_rewards = average_rewards
        self.vectorized = vectorized

    _reward_eps = 1e-4

    def _lmbda(self, reward: torch.Tensor):
        return self.lmbda if self.lmbda.device == reward.device else self.lmbda.to(reward.device)

    def _target(self, tensordict, next_value, time_dim):
        reward, done, terminated = self._rewards(tensordict)
        gamma = self._gamma(tensordict, reward)
        return vec_td_lambda_return_estimate(
            gamma,
            self._lmbda(reward),
            next_value.to(reward.dtype),
            reward,
            done,
            terminated,
            time_dim=time_dim,
        )


class TD1Estimator(TDLambdaEstimator):
    """TD(1) target: discounted rewards to the trajectory end, bootstrapped at truncation.

    Keyword Args:
        gamma (float or Tensor): discount.
        value_network (TensorDictModule or None): the critic.
        average_rewards (bool): standardize the rewards before use. Defaults to ``False``.
        shifted, differentiable, skip_existing, advantage_key, value_target_key,
        value_key, device, deactivate_vmap, time_dim, shifted_budget, group_key: see
        :class:`ValueEstimatorBase`.
    """

    _reward_eps = 1e-5

    def __init__(
        self,
        *,
        gamma: float | torch.Tensor,
        value_network: TensorDictModuleBase | None,
        average_rewards: bool = False,
        differentiable: bool = False,
        skip_existing: bool | None = None,
        advantage_key=None,
        value_target_key=None,
        value_key=None,
        shifted: bool = False,
        device: torch.device | None = None,
        time_dim: int | None = None,
        deactivate_vmap: bool = False,
        value_chunk_size: int | None = None,
        num_chunks: int | None = None,
        num_chunk: int | None = None,
        value_chunk_dim: int = 0,
        shifted_budget: int = 1,
        group_key=None,
    ) -> None:
        super().__init__(
            gamma=gamma,
            lmbda=1.0,
            value_network=value_network,
            average_rewards=average_rewards,
            differentiable=differentiable,
            skip_existing=skip_existing,
            advantage_key=advantage_key,
            value_target_key=value_target_key,
            value_key=value_key,
            shifted=shifted,
            device=device,
            time_dim=time_dim,
            deactivate_vmap=deactivate_vmap,
            value_chunk_size=value_chunk_size,
            num_chunks=num_chunks,
            num_chunk=num_chunk,
            value_chunk_dim=value_chunk_dim,
            shifted_budget=shifted_budget,
            group_key=group_key,
        )


class GAE(ValueEstimatorBase):
    """Generalized advantage estimate (Schulman et al., 2016, https://arxiv.org/abs/1506.02438).

    Keyword Args:
        gamma (float or Tensor): discount.
        lmbda (float or Tensor): GAE lambda in ``[0, 1]``.
        value_network (TensorDictModule or None): the critic; ``None`` reads ``value``
            and ``("next", value)`` from the input.
        average_gae (bool): standardize the advantage (mean 0, std 1) before writing it.
            Defaults to ``False``.
        differentiable (bool): keep gradients through the estimate. Defaults to ``False``.
        vectorized (bool): accepted for TorchRL compatibility; always vectorized here.
        skip_existing (bool, optional): reuse values present in the input.
        advantage_key, value_target_key, value_key (NestedKey, optional): shortcuts for
            :meth:`set_keys`.
        shifted (bool): one value-network call for ``V(s)`` and ``V(s')``.
        device (torch.device, optional): device of the buffers.
        time_dim (int, optional): the time dimension of the input TensorDict.
        auto_reset_env (bool): the data come from an env that resets itself, so the next
            observation of a truncated step is the reset one, not the true one: a
            truncated step (``("next", "truncated")``) then ends its trajectory like a
            termination, with ``gamma * V(s_t)`` added to its reward as the bootstrap.
            Defaults to ``False``.
        deactivate_vmap (bool): accepted for TorchRL compatibility.
        shifted_budget, group_key: see :class:`ValueEstimatorBase`; with ``group_key``,
            ``average_gae`` standardizes within each group.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> value_net = TensorDictModule(torch.nn.Linear(3, 1), in_keys=["obs"], out_keys=["state_value"])
        >>> module = GAE(gamma=0.98, lmbda=0.94, value_network=value_net)
        >>> obs, next_obs = torch.randn(2, 1, 10, 3)
        >>> flags = torch.zeros(1, 10, 1, dtype=torch.bool)
        >>> td = TensorDict(
        ...     {"obs": obs, "next": {"obs": next_obs, "reward": torch.randn(1, 10, 1), "done": flags, "terminated": flags}},
        ...     [1, 10],
        ... )
        >>> td = module(td)
        >>> td["advantage"].shape, td["value_target"].shape
        (torch.Size([1, 10, 1]), torch.Size([1, 10, 1]))
    """

    def __init__(
        self,
        *,
        gamma: float | torch.Tensor,
        lmbda: float | torch.Tensor,
        value_network: TensorDictModuleBase | None,
        average_gae: bool = False,
        differentiable: bool = False,
        vectorized: bool | None = None,
        skip_existing: bool | None = None,
        advantage_key=None,
        value_target_key=None,
        value_key=None,
        shifted: bool = False,
        device: torch.device | None = None,
        time_dim: int | None = None,
        auto_reset_env: bool = False,
        deactivate_vmap: bool = False,
        value_chunk_size: int | None = None,
        num_chunks: int | None = None,
        num_chunk: int | None = None,
        value_chunk_dim: int = 0,
        shifted_budget: int = 1,
        group_key=None,
    ) -> None:
        super().__init__(
            value_network=value_network,
            shifted=shifted,
            differentiable=differentiable,
            skip_existing=skip_existing,
            advantage_key=advantage_key,
            value_target_key=value_target_key,
            value_key=value_key,
            device=device,
            deactivate_vmap=deactivate_vmap,
            value_chunk_size=value_chunk_size,
            num_chunks=num_chunks,
            num_chunk=num_chunk,
            value_chunk_dim=value_chunk_dim,
            shifted_budget=shifted_budget,
            group_key=group_key,
            time_dim=time_dim,
        )
        self.register_buffer("gamma", torch.as_tensor(gamma, device=self._device).clone())
        self.register_buffer("lmbda", torch.as_tensor(lmbda, device=self._device).clone())
        self.average_gae = average_gae
        self.vectorized = vectorized
        self.auto_reset_env = auto_reset_env

    def _prepare_signals(self, reward, done, terminated, value):
        """Reward, done and terminated as the recursion reads them (here: unchanged)."""
        return reward, done, terminated

    def _broadcast_optional(self, tensor: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
        """The ``truncated`` flags of ``auto_reset_env`` shaped as the value (unchanged)."""
        return tensor

    def _kept_dims(self) -> tuple[int, ...]:
        """The dims of the advantage standardized apart when ``average_gae`` (here: none)."""
        return ()

    def _normalize_advantage(
        self,
        advantage: torch.Tensor,
        valid: torch.Tensor | None = None,
        groups: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The advantage standardized when ``average_gae``: over all its entries (the valid
        ones of a shifted call), or within each group of ``groups``; each index of the
        :meth:`_kept_dims` on its own."""
        if valid is not None:
            valid = expand_as_right(valid, advantage)
        return _standardize(advantage, 1e-4, groups, valid, self._kept_dims())

    def _gae(self, tensordict, value, next_value, time_dim):
        reward, done, terminated = self._prepare_signals(*self._signals(tensordict), value)
        gamma = self._gamma(tensordict, reward)
        lmbda = self.lmbda if self.lmbda.device == reward.device else self.lmbda.to(reward.device)
        if self.auto_reset_env:
            truncated = self._require(tensordict, ("next", "truncated"), "truncated")
            truncated = self._broadcast_optional(truncated, value)
            # the reset observation stands in the next slot: bootstrap from V(s_t) instead
            reward = reward + gamma * value * truncated
            terminated = done
        return vec_generalized_advantage_estimate(
            gamma,
            lmbda,
            value,
            next_value.to(value.dtype),
            reward,
            done,
            terminated,
            time_dim=time_dim,
        )

    def _estimate(self, tensordict, value, next_value, time_dim):
        advantage, target = self._gae(tensordict, value, next_value, time_dim)
        if self.average_gae:
            advantage = self._normalize_advantage(
                advantage, tensordict.get("shifted_valid", None), self._group_ids(tensordict)
            )
        return advantage, target

    def value_estimate(
        self,
        tensordict: TensorDictBase,
        params: TensorDictBase | None = None,
        target_params: TensorDictBase | None = None,
        time_dim: int | None = None,
        next_value: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        """The GAE value target ``advantage + V(s)`` (needs ``V(s)``: computed or read).

        Args:
            tensordict (TensorDictBase): the batch.
            params (TensorDictBase, optional): value-network parameters for ``s``.
            target_params (TensorDictBase, optional): parameters for ``s'``.
            time_dim (int, optional): the time dimension of ``tensordict``.
            next_value (Tensor, optional): ``V(s')``, if already computed.

        Returns:
            the value target.
        """
        time_dim = self._time_dim(tensordict, time_dim)
        if next_value is None:
            value, next_value = self._values(tensordict, params, target_params, time_dim)
        else:
            value = tensordict.get(self.tensor_keys.value, None)
            if value is None:
                value = self._values(tensordict, params, target_params, time_dim)[0]
        data = self._cut_at_valid(tensordict, tensordict.get("shifted_valid", None), time_dim)
        return self._gae(data, value, next_value, time_dim)[1]


def _warn_renamed(old: str, new: str) -> None:
    warnings.warn(
        f"{old} is deprecated, use {new} instead (same arguments)",
        DeprecationWarning,
        stacklevel=3,
    )


class TD0Estimate(TD0Estimator):
    """TorchRL's former name of :class:`TD0Estimator`; building one warns.

    It takes :class:`TD0Estimator`'s arguments and computes the same values (it is a
    subclass); only the ``DeprecationWarning`` differs.

    Examples:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     est = TD0Estimate(gamma=0.9, value_network=None)
        >>> str(caught[0].message)
        'TD0Estimate is deprecated, use TD0Estimator instead (same arguments)'
    """

    @functools.wraps(TD0Estimator.__init__)
    def __init__(self, *args, **kwargs) -> None:
        _warn_renamed("TD0Estimate", "TD0Estimator")
        super().__init__(*args, **kwargs)


class TD1Estimate(TD1Estimator):
    """TorchRL's former name of :class:`TD1Estimator`; building one warns.

    It takes :class:`TD1Estimator`'s arguments and computes the same values (it is a
    subclass); only the ``DeprecationWarning`` differs.
    """

    @functools.wraps(TD1Estimator.__init__)
    def __init__(self, *args, **kwargs) -> None:
        _warn_renamed("TD1Estimate", "TD1Estimator")
        super().__init__(*args, **kwargs)


class TDLambdaEstimate(TDLambdaEstimator):
    """TorchRL's former name of :class:`TDLambdaEstimator`; building one warns.

    It takes :class:`TDLambdaEstimator`'s arguments and computes the same values (it is a
    subclass); only the ``DeprecationWarning`` differs.
    """

    @functools.wraps(TDLambdaEstimator.__init__)
    def __init__(self, *args, **kwargs) -> None:
        _warn_renamed("TDLambdaEstimate", "TDLambdaEstimator")
        super().__init__(*args, **kwargs)

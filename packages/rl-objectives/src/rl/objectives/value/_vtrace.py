"""V-trace estimator module (IMPALA)."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase, is_tensor_collection
from tensordict.nn import InteractionType, TensorDictModuleBase, interaction_type

from rl.objectives.value._base import ValueEstimatorBase, _held_out, _standardize
from rl.objectives.value.functional import vtrace_advantage_estimate

__all__ = ["VTrace"]


class VTrace(ValueEstimatorBase):
    """V-trace advantages and targets (Espeholt et al., 2018, https://arxiv.org/abs/1802.01561).

    The importance weight of each step is ``pi(a|s) / mu(a|s)``: ``mu`` is read from
    ``tensor_keys.sample_log_prob`` (written by the collecting policy), ``pi`` is the
    current ``actor_network``'s log-probability of the action it draws under the active
    interaction type (its ``default_interaction_type`` when none is set), as TorchRL 0.14
    does; the stored action is not read.

    Keyword Args:
        gamma (float or Tensor): discount (a scalar).
        actor_network (ProbabilisticTensorDictModule): the current policy (``get_dist``).
        value_network (TensorDictModule or None): the critic.
        rho_thresh (float or Tensor): clip of the importance weights in the TD errors.
            Defaults to ``1.0``.
        c_thresh (float or Tensor): clip of the trace coefficients. Defaults to ``1.0``.
        average_adv (bool): standardize the advantage. Defaults to ``False``.
        differentiable, skip_existing, advantage_key, value_target_key, value_key,
        shifted, device, time_dim, shifted_budget, group_key: see
        :class:`ValueEstimatorBase`; with ``group_key``, ``average_adv`` standardizes
        within each group.
    """

    def __init__(
        self,
        *,
        gamma: float | torch.Tensor,
        actor_network: TensorDictModuleBase,
        value_network: TensorDictModuleBase | None,
        rho_thresh: float | torch.Tensor = 1.0,
        c_thresh: float | torch.Tensor = 1.0,
        average_adv: bool = False,
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
        gamma = torch.as_tensor(gamma, device=self._device).clone()
        if gamma.ndim:
            raise ValueError(
                f"VTrace needs a scalar gamma, got a tensor of shape {tuple(gamma.shape)}"
            )
        self.register_buffer("gamma", gamma)
        self.register_buffer("rho_thresh", torch.as_tensor(rho_thresh, device=self._device).clone())
        self.register_buffer("c_thresh", torch.as_tensor(c_thresh, device=self._device).clone())
        self.__dict__["actor_network"] = actor_network
        self.average_adv = average_adv

    @classmethod
    def for_loss(cls, loss_module, **hyperparams):
        """As :meth:`ValueEstimatorBase.for_loss`, with the loss's ``actor_network`` too
        (unless ``actor_network`` is given)."""
        if hyperparams.get("actor_network") is None:
            hyperparams["actor_network"] = loss_module.actor_network
        return super().for_loss(loss_module, **hyperparams)

    @property
    def in_keys(self):
        key = self.tensor_keys.sample_log_prob
        return [*super().in_keys, *(key if isinstance(key, list) else [key])]

    def _log_probs(
        self, tensordict: TensorDictBase, like: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys = self.tensor_keys.sample_log_prob
        if isinstance(keys, list):  # per-head log-probs: the action's is their sum
            parts = [self._require(tensordict, key, "sample_log_prob") for key in keys]
            log_mu = sum(p.reshape(*like.shape[:-1], -1).sum(-1) for p in parts)
        else:
            log_mu = self._require(tensordict, keys, "sample_log_prob")
        if is_tensor_collection(log_mu):
            log_mu = log_mu.sum(dim="feature", reduce=True)
        actor = self.actor_network
        with _held_out(actor):
            dist = actor.get_dist(tensordict.select(*actor.in_keys, strict=False))
            # As TorchRL 0.14: pi scores the action the current policy draws under the
            # active interaction type (the actor's default when none is set), so the
            # stored action is not needed.
            mode = interaction_type() or actor.default_interaction_type
            if mode is InteractionType.RANDOM:
                shape = torch.Size(actor.num_samples or ())
                action = dist.rsample(shape) if dist.has_rsample else dist.sample(shape)
            else:
                action = actor._dist_sample(dist, interaction_type=mode)
            log_pi = dist.log_prob(action)
            if is_tensor_collection(log_pi):
                log_pi = log_pi.sum(dim="feature", reduce=True)
        return log_pi.reshape(like.shape), log_mu.reshape(like.shape)

    def _estimate(self, tensordict, value, next_value, time_dim):
        reward, done, terminated = self._signals(tensordict)
        gamma = self._gamma(tensordict, reward)
        log_pi, log_mu = self._log_probs(tensordict, value)
        advantage, target = vtrace_advantage_estimate(
            gamma,
            log_pi,
            log_mu,
            value,
            next_value.to(value.dtype),
            reward,
            done,
            terminated,
            rho_thresh=self.rho_thresh,
            c_thresh=self.c_thresh,
            time_dim=time_dim,
        )
        if self.average_adv:
            advantage = _standardize(advantage, 1e-5, self._group_ids(tensordict))
        return advantage, target

    def value_estimate(
        self, tensordict, target_params=None, next_value=None, time_dim=None, **kwargs
    ):
        """The V-trace target ``v_s`` (needs ``V(s)``: computed or read)."""
        time_dim = self._time_dim(tensordict, time_dim)
        value, computed_next = self._values(tensordict, None, target_params, time_dim)
        next_value = computed_next if next_value is None else next_value
        return self._estimate(tensordict, value, next_value, time_dim)[1]

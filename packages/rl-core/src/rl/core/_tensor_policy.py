"""The tensor-policy protocol: a policy's tensors-in / tensors-out twin.

A ``TensorDictModule`` reads its ``in_keys``, calls its module on the tensors and writes
its ``out_keys``; most of the cost of a call on a small network is tensordict's own
machinery around it (dispatch, skip-existing checks, key parsing, hooks of the wrapper).
:func:`tensor_policy` recognises the policies that are only that (a plain
``TensorDictModule``, a ``TensorDictSequential`` of them, a plain
``ProbabilisticTensorDictSequential``) and builds, once, a :class:`TensorPolicy` that
does the same tensor calls in the same order without that machinery. This is the one
place where that recognition lives; rollout loops (collectors, envs) and rl.modules'
actors use it.

The protocol: a module that knows its own tensor twin implements a public method
``tensor_forward(self) -> tuple[in_keys, out_keys, fn] | None``. ``fn(*tensors at
in_keys)`` returns the tensors its forward writes at ``out_keys`` (string keys, each
once, in the order first written), with the same values and random draws; ``None``
where that is not safe (hooks, a subclass's forward, nested keys, ...).
:func:`tensor_policy` asks for it first, and its answer is final. rl-core imports
neither rl.modules nor rl.collectors: the protocol is duck-typed.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.base import NO_DEFAULT
from tensordict.nn import (
    CompositeDistribution,
    InteractionType,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictModuleBase,
    TensorDictSequential,
    interaction_type,
    skip_existing,
)
from torch import distributions as D
from torch import nn
from torch.nn.modules import module as _torch_module

from ._exploration import set_thread_exploration_type

__all__ = ["TensorPolicy", "tensor_policy"]

try:  # how tensordict draws a sample and its log-prob in one call (0.15)
    from tensordict.nn.probabilistic import (
        _get_joint_sample_and_log_prob as _joint_sample_and_log_prob,
    )
except ImportError:  # another tensordict: no fast path for probabilistic modules
    _joint_sample_and_log_prob = None

_TDM_METHODS = ("__call__", "forward", "_call_module", "_write_to_tensordict")
_SEQ_METHODS = ("__call__", "forward", "_run_module", "_module_iter")
_PROB_SEQ_METHODS = (*_SEQ_METHODS, "get_dist_params")
_PROB_METHODS = ("__call__", "forward", "get_dist", "_dist_sample", "_draw_dist_sample")


class TensorPolicy:
    """A policy's tensor-level twin: ``forward(*in_tensors) -> out_tensors``.

    ``in_keys`` are the keys the policy reads (before it writes them), ``out_keys`` the
    keys it writes, each once, in the order it first writes them. Calling the object on
    a TensorDict reads ``in_keys``, runs :meth:`forward` and writes ``out_keys`` with
    ``set``, as the policy does.

    Args:
        policy: the policy this one stands for (its modules are shared, not copied:
            weights updated in place are used at the next call).
        in_keys: the string keys read.
        out_keys: the string keys written.
        forward: the tensor function.
    """

    def __init__(
        self,
        policy: nn.Module,
        in_keys: list[str],
        out_keys: list[str],
        forward: Callable[..., tuple[torch.Tensor, ...]],
        gets: list[tuple] | None = None,
    ) -> None:
        self.policy = policy
        self.in_keys = in_keys
        self.out_keys = out_keys
        self.forward = forward
        # (default, get kwargs) of the TensorDictModule reading each in_key first
        self._gets = gets if gets is not None else [(None, {})] * len(in_keys)
        # the modules whose hooks usable() checks: listed at its first check, as most
        # twins are built to be checked never (usable()'s own rebuild, a sub-module's
        # twin inside an actor's) and a walk of the module tree is most of a build
        self._hooked: list | None = None

    def usable(self) -> bool:
        """Whether the fast path still does what the policy does (no hook was added, the
        skip-existing mode is off); checked once per rollout.

        The twin is rebuilt from the policy as it is now (about 30 us), so that
        attributes changed since construction (``return_log_prob``, the distribution
        class, ...) are followed; ``in_keys`` / ``out_keys`` are updated with it."""
        if skip_existing():
            return False
        if _torch_module._global_forward_hooks or _torch_module._global_forward_pre_hooks:
            return False
        if self._hooked is None:
            self._hooked = [m for m in self.policy.modules() if isinstance(m, TensorDictModuleBase)]
        if any(_has_hooks(m) for m in self._hooked):
            return False
        fresh = tensor_policy(self.policy)
        if fresh is None:
            return False
        self.in_keys, self.out_keys = fresh.in_keys, fresh.out_keys
        self.forward, self._gets = fresh.forward, fresh._gets
        return True

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        # the caller checks usable() (once per rollout, not per step)
        get = tensordict._get_tuple_maybe_non_tensor
        outs = self.forward(
            *[get((key,), default, **kw) for key, (default, kw) in zip(self.in_keys, self._gets)]
        )
        for key, value in zip(self.out_keys, outs):
            if type(value) is not torch.Tensor:
                value = TensorDict.from_any(value)  # as TensorDictModule writes it
            tensordict.set(key, value)
        return tensordict

    def __repr__(self) -> str:
        return f"TensorPolicy(in_keys={self.in_keys}, out_keys={self.out_keys})"


def _has_hooks(module: nn.Module) -> bool:
    return bool(module._forward_hooks or module._forward_pre_hooks)


def _same_methods(obj, base: type, names: tuple[str, ...]) -> bool:
    cls = type(obj)
    return all(getattr(cls, name) is getattr(base, name) for name in names)


def _plain_keys(keys) -> bool:
    return all(type(key) is str and key != "_" for key in keys)


def _module_step(tdm: TensorDictModule):
    """``(in_keys, out_keys, fn)`` of a plain ``TensorDictModule``, else ``None``."""
    if not _same_methods(tdm, TensorDictModule, _TDM_METHODS):
        return None
    if tdm._kwargs is not None or tdm.method is not None or tdm.method_kwargs:
        return None
    if tdm.inplace is not True or _has_hooks(tdm):
        return None
    in_keys, out_keys = list(tdm.in_keys), list(tdm.out_keys)
    if not (_plain_keys(in_keys) and _plain_keys(out_keys)):
        return None
    if list(tdm.out_keys_source) != out_keys or len(set(out_keys)) != len(out_keys):
        return None
    module = tdm.module
    if isinstance(module, (TensorDictModule, TensorDictSequential)) or not callable(module):
        return None
    default = NO_DEFAULT if tdm.strict else None
    return in_keys, out_keys, module, (default, dict(tdm._get_kwargs))


def _declared_twin(policy):
    """The policy's ``tensor_forward`` where its class declares one, else ``None``. Looked
    up on the class: a wrapper that forwards attribute reads to the module it wraps
    (``TensorDictModuleWrapper``) does what the wrapped module does and more, so the
    wrapped module's twin is not the wrapper's."""
    if getattr(type(policy), "tensor_forward", None) is None:
        return None
    return policy.tensor_forward


def _steps(policy) -> list | None:
    """The ``(in_keys, out_keys, fn)`` stages of ``policy`` in call order, else ``None``."""
    own = _declared_twin(policy)
    if own is not None:  # a module with its own twin (an rl.modules actor in a sequence)
        twin = _checked_twin(own())
        return None if twin is None else [(*twin, (NO_DEFAULT, {}))]
    if type(policy) is TensorDictSequential or (
        isinstance(policy, TensorDictSequential)
        and _same_methods(policy, TensorDictSequential, _SEQ_METHODS)
        and not isinstance(policy, ProbabilisticTensorDictSequential)
    ):
        if policy.partial_tolerant or policy.inplace not in (True, None) or _has_hooks(policy):
            return None
        if policy._select_before_return:
            return None
        stages: list = []
        for sub in policy._module_iter():
            sub_steps = _steps(sub)
            if sub_steps is None:
                return None
            stages += sub_steps
        return stages
    if isinstance(policy, TensorDictModule):
        step = _module_step(policy)
        return None if step is None else [step]
    return None


def _sampler(prob: ProbabilisticTensorDictModule):
    """The ``(in_keys, out_keys, fn)`` stage of a plain ``ProbabilisticTensorDictModule``
    (one sample key, a ``torch.distributions`` class, no generator, no ``num_samples``):
    ``fn(*params)`` draws as its ``forward`` does, else ``None``."""
    if _joint_sample_and_log_prob is None or _has_hooks(prob):
        return None
    if not _same_methods(prob, ProbabilisticTensorDictModule, _PROB_METHODS):
        return None
    cls = prob.distribution_class
    if not (isinstance(cls, type) and issubclass(cls, D.Distribution)):
        return None
    if issubclass(cls, CompositeDistribution) or prob.num_samples is not None:
        return None
    if prob._generator is not None or prob._generator_key is not None:
        return None
    in_keys, sample_keys = list(prob.in_keys), list(prob.dist_sample_keys)
    dist_keys = [key[-1] if isinstance(key, tuple) else key for key in prob.dist_keys]
    if len(sample_keys) != 1 or not _plain_keys([*in_keys, *sample_keys]):
        return None
    out_keys = list(sample_keys)
    log_prob = bool(prob.return_log_prob)
    if log_prob:
        try:
            out_keys.append(prob.log_prob_key)
        except RuntimeError:
            return None
        if not _plain_keys(out_keys) or out_keys[0] == out_keys[1]:
            return None
    if type(prob.distribution_kwargs) is not dict:
        return None
    default = prob.default_interaction_type
    dist_sample = prob._dist_sample

    def sample(*params):
        dist = cls(**dict(zip(dist_keys, params)), **prob.distribution_kwargs)
        itype = interaction_type()
        joint = None
        if log_prob and (itype or default) is InteractionType.RANDOM:
            joint = _joint_sample_and_log_prob(dist)
        if joint is not None:
            value, lp = joint(torch.Size(()))
        else:
            value, lp = dist_sample(dist, interaction_type=itype), None
        if not log_prob:
            return (value,)
        return value, (dist.log_prob(value) if lp is None else lp)

    return in_keys, out_keys, sample, (None, {})


def _prob_steps(policy) -> list | None:
    """The stages of a plain ``ProbabilisticTensorDictSequential`` (plain
    ``TensorDictModule`` stages, then a plain ``ProbabilisticTensorDictModule``)."""
    if not _same_methods(policy, ProbabilisticTensorDictSequential, _PROB_SEQ_METHODS):
        return None
    if policy.return_composite or not policy._requires_sample or _has_hooks(policy):
        return None
    if policy.partial_tolerant or policy.inplace not in (True, None):
        return None
    if policy._select_before_return:
        return None
    modules = list(policy._module_iter())
    last = modules[-1]
    if not isinstance(last, ProbabilisticTensorDictModule):
        return None
    det = policy._det_part
    stages = _steps(det) if len(modules) > 1 else []
    if stages is None or (len(modules) > 1 and _has_hooks(det)):
        return None
    sampler = _sampler(last)
    if sampler is None:
        return None
    return [*stages, sampler]


def _is_compiled(module: nn.Module) -> bool:
    """Whether ``module`` is the wrapper ``torch.compile`` returns for a module."""
    from torch._dynamo.eval_frame import OptimizedModule

    return isinstance(module, OptimizedModule)


def tensor_policy(policy) -> TensorPolicy | None:
    """A :class:`TensorPolicy` doing what ``policy`` does, or ``None`` where ``policy``
    is not a plain ``TensorDictModule`` / ``TensorDictSequential`` of them, or a plain
    ``ProbabilisticTensorDictSequential`` (string keys, the module called with the
    tensors, outputs written in place, no hooks).

    A policy with a ``tensor_forward()`` method (the protocol: rl.modules'
    ``ProbabilisticActor``, ``QValueActor``, ...) is asked for its own tensor twin first,
    duck-typed, so that rl-core needs no import of rl.modules; its answer is final
    (``None``: no fast path).

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule, TensorDictSequential
        >>> from rl.core import tensor_policy
        >>> policy = TensorDictSequential(
        ...     TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["logits"]),
        ...     TensorDictModule(lambda x: x.argmax(-1), ["logits"], ["action"]),
        ... )
        >>> fast = tensor_policy(policy)
        >>> fast.in_keys, fast.out_keys
        (['observation'], ['logits', 'action'])
        >>> logits, action = fast.forward(torch.zeros(4, 3))
        >>> action.shape
        torch.Size([4])
        >>> td = fast(TensorDict(observation=torch.zeros(4, 3), batch_size=[4]))
        >>> sorted(td.keys())
        ['action', 'logits', 'observation']
        >>> print(tensor_policy(lambda td: td))
        None
    """
    if not isinstance(policy, nn.Module) or _is_compiled(policy):
        # a torch.compile'd module forwards attribute reads to the module it wraps: its
        # twin would be that module's, eager, and called with tensors through the wrapper
        return None
    own = _declared_twin(policy)
    if own is not None:
        return _from_protocol(policy, own())
    prob_default = None
    if isinstance(policy, ProbabilisticTensorDictSequential):
        stages = _prob_steps(policy)
        prob_default = policy._last_module.default_interaction_type
    else:
        stages = _steps(policy)
    if not stages:
        return None
    in_keys: list[str] = []
    out_keys: list[str] = []
    gets: list[tuple] = []
    for stage_in, stage_out, _, how in stages:
        for key in stage_in:
            if key not in out_keys and key not in in_keys:
                in_keys.append(key)
                gets.append(how)
        out_keys += [k for k in stage_out if k not in out_keys]
    if len(stages) == 1:
        forward = _single(stages[0][2], len(out_keys), out_keys)
    else:
        forward = _chain(stages, in_keys, out_keys)
    if prob_default is not None:
        forward = _with_interaction_type(forward, prob_default)
    return TensorPolicy(policy, in_keys, out_keys, forward, gets)


def _from_protocol(policy: nn.Module, twin) -> TensorPolicy | None:
    """The :class:`TensorPolicy` of a policy's own tensor twin (``None`` if it has none).

    A policy class (rl.modules' actors) opts in with a method ``tensor_forward()``
    returning ``(in_keys, out_keys, fn)``: ``fn(*tensors at in_keys)`` returns the tensors
    its forward writes at ``out_keys`` (string keys, each once, in the order first
    written), with the same values and random draws; or ``None`` where that is not
    safe. The in_keys are required, as the actors' forward requires them."""
    twin = _checked_twin(twin)
    if twin is None:
        return None
    in_keys, out_keys, forward = twin
    return TensorPolicy(policy, in_keys, out_keys, forward, [(NO_DEFAULT, {})] * len(in_keys))


def _checked_twin(twin) -> tuple | None:
    """``(in_keys, out_keys, fn)`` of a twin with string keys, each out_key once."""
    if twin is None:
        return None
    in_keys, out_keys, forward = twin
    in_keys, out_keys = list(in_keys), list(out_keys)
    if not (_plain_keys(in_keys) and _plain_keys(out_keys)) or not out_keys:
        return None
    if len(set(out_keys)) != len(out_keys):
        return None
    return in_keys, out_keys, forward


def _with_interaction_type(forward, default: InteractionType):
    """Runs ``forward`` under ``default`` where no interaction type is set, as
    ``ProbabilisticTensorDictSequential`` runs its modules."""

    def run(*tensors):
        if interaction_type() is not None:
            return forward(*tensors)
        with set_thread_exploration_type(default):
            return forward(*tensors)

    return run


def _as_tuple(out, out_keys: list[str]) -> tuple:
    """The module's output as ``TensorDictModule`` reads it: one value per out_key."""
    if out is None:
        out = ()
    if (
        type(out) is not torch.Tensor
        and type(out) is not tuple
        and isinstance(out, dict | TensorDictBase)
        and all(key in out for key in out_keys)
    ):
        out = tuple(out.get(key) for key in out_keys)
    if not isinstance(out, tuple):
        out = (out,)
    if len(out) != len(out_keys):
        raise RuntimeError(
            f"the policy's module returned {len(out)} values for the out_keys {out_keys}"
        )
    return out


def _single(module, n: int, out_keys: list[str]):
    def forward(*tensors):
        out = module(*tensors)
        if type(out) is tuple and len(out) == n:
            return out
        return _as_tuple(out, out_keys)

    return forward


def _chain(stages: list, in_keys: list[str], out_keys: list[str]):
    def forward(*tensors):
        values = dict(zip(in_keys, tensors))
        for stage_in, stage_out, module, _ in stages:
            out = _as_tuple(module(*[values[k] for k in stage_in]), stage_out)
            for key, value in zip(stage_out, out):
                # a later stage reads what the sequence would have written
                values[key] = value if type(value) is torch.Tensor else TensorDict.from_any(value)
        return tuple(values[k] for k in out_keys)

    return forward

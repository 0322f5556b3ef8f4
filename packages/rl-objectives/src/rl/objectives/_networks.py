"""How a loss calls its networks: one output, a distribution, an ensemble's stacked outputs.

A plain :class:`~tensordict.nn.TensorDictModule` is called on its input tensors directly,
skipping the copy of the input TensorDict and the writes of the outputs (the per-call cost
of TensorDict dispatch is comparable to a small network's compute); anything else runs as
a TensorDict module on a shallow copy, so the caller's TensorDict is never written.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from tensordict import TensorDictBase
from tensordict.nn import ProbabilisticTensorDictSequential, TensorDictModule
from torch import nn

__all__: list[str] = []


def _next_keys(keys) -> list:
    """``keys`` read under ``"next"``: ``"reward"`` -> ``("next", "reward")``."""
    return [("next", *k) if isinstance(k, tuple) else ("next", k) for k in keys]


def _is_plain_tdmodule(module) -> bool:
    """A TensorDictModule whose call is exactly ``module.module(*inputs)`` -> ``out_keys``."""
    return (
        isinstance(module, TensorDictModule)
        and type(module).forward is TensorDictModule.forward
        and module._kwargs is None
        and module.method is None
        and not module.method_kwargs
        and not module._forward_hooks
        and not module._forward_pre_hooks
    )


def _module_inputs(module, tensordict: TensorDictBase, overrides=None) -> list:
    """The entries of ``module.in_keys`` (``overrides`` first), None where absent."""
    if overrides:
        return [
            overrides[key] if key in overrides else tensordict.get(key, None)
            for key in module.in_keys
        ]
    return [tensordict.get(key, None) for key in module.in_keys]


def _network_output(
    module: nn.Module, tensordict: TensorDictBase, out_key, overrides=None
) -> torch.Tensor:
    """Entry ``out_key`` written by ``module`` on ``tensordict`` (left unchanged).

    ``overrides`` maps input keys to tensors used instead of the entries of
    ``tensordict`` (e.g. a freshly sampled action).
    """
    if _is_plain_tdmodule(module) and len(module.out_keys) == 1 and module.out_keys[0] == out_key:
        inputs = _module_inputs(module, tensordict, overrides)
        if all(x is not None for x in inputs):
            return module.module(*inputs)
    tensordict = tensordict.copy()
    if overrides:
        tensordict.update(overrides)
    return module(tensordict).get(out_key)


def _ensemble_output(members, tensordict: TensorDictBase, out_key, overrides=None) -> torch.Tensor:
    """:func:`_network_output` of every member of an ensemble, stacked: ``[N, *B, ...]``.

    ``members`` come from ``LossModule._ensemble(name, kind)``: online (gradients to the
    stacked parameters), detached (no gradient to them; gradients still reach the inputs)
    or target copies.
    """
    return torch.stack([_network_output(m, tensordict, out_key, overrides) for m in members])


# parameter-free layers that act on each feature vector alone (elementwise): a batched
# evaluation applies them to ``[members, N, features]`` as each member would to ``[N, ...]``
_ELEMENTWISE = frozenset(
    {
        nn.CELU,
        nn.ELU,
        nn.GELU,
        nn.Hardsigmoid,
        nn.Hardswish,
        nn.Hardtanh,
        nn.Identity,
        nn.LeakyReLU,
        nn.LogSigmoid,
        nn.Mish,
        nn.ReLU,
        nn.ReLU6,
        nn.SELU,
        nn.SiLU,
        nn.Sigmoid,
        nn.Softplus,
        nn.Softsign,
        nn.Tanh,
        nn.Tanhshrink,
    }
)


def _hooked(*modules: nn.Module) -> bool:
    """Whether one of ``modules`` has a forward or backward hook of its own."""
    for module in modules:
        if (
            module._forward_hooks
            or module._forward_pre_hooks
            or module._backward_hooks
            or module._backward_pre_hooks
        ):
            return True
    return False


def _altered(module: nn.Module) -> bool:
    """Whether ``module`` has a hook of its own or a ``forward`` replaced on the instance:
    something a batched step, which calls the class's forward, would skip."""
    return _hooked(module) or "forward" in module.__dict__


def _global_hooks() -> bool:
    """Whether a hook was registered for every module (``register_module_forward_hook``...)."""
    module = nn.modules.module
    return bool(
        module._global_forward_hooks
        or module._global_forward_pre_hooks
        or module._global_backward_hooks
        or module._global_backward_pre_hooks
    )


def _layer_signature(layers) -> tuple:
    """What batched steps take from ``layers``: each one's class and settings."""
    return tuple((type(layer), layer.extra_repr()) for layer in layers)


class _BatchedMLP:
    """An ensemble of one MLP structure run as batched matrix products on its stacks.

    Eagerly, N members called one by one cost N small products per layer, and the
    backward of their views stacks the N gradients of every parameter again; a batched
    product (``baddbmm`` on the ``[N, out, in]`` weight stack) gives the stacked
    gradients directly (used where that is faster: LossModule._batched_values). Built
    by :meth:`of` for a plain TensorDictModule around an :class:`~rl.modules.MLP` (or
    ``nn.Sequential``) that starts with an ``nn.Linear`` and holds only linear layers
    (each its own parameters) and parameter-free elementwise activations; anything
    else (norms, dropout, noisy, custom or parametrized layers, buffers, hooks, members
    of different structures) keeps the member calls. The values equal the member
    calls' up to rounding (``bmm`` against ``addmm``).
    """

    def __init__(self, network, sequential, steps, out_shape):
        self.network = network
        self.sequential = sequential
        #: ``("linear", weight position, bias position or None)`` or ``("act", module)``
        self.steps = steps
        self.out_shape = out_shape
        self.children = tuple(sequential)
        self.types = tuple(type(layer) for layer in self.children)
        # the largest layer product per row (in x out), fixed by the layers' sizes
        self.largest = max(
            layer.in_features * layer.out_features
            for layer in self.children
            if type(layer) is nn.Linear
        )
        # an activation last returns its own output (Tanh saves it for the backward):
        # copied, as the members' stack was, a caller may still change it in place
        self.copy_out = steps[-1][0] == "act"

    @classmethod
    def of(cls, network: nn.Module, keys: list, members: list | None = None) -> _BatchedMLP | None:
        """The plan for ``network`` (member 0 of an ensemble whose stacked parameters
        are ``keys``, in order), or None when it is not such an MLP. ``members``: the
        networks the ensemble was given, when it was given several; they must all have
        member 0's layers, inputs and outputs, and no hook or replaced ``forward``
        (the loss's copies of them keep theirs)."""
        from rl.modules.models._mlp import MLP

        if not (_is_plain_tdmodule(network) and len(network.out_keys) == 1):
            return None
        seq = network.module
        if type(seq) is MLP:
            out_shape = tuple(seq.out_features) if seq._reshape_out else None
        elif type(seq) is nn.Sequential and len(network.in_keys) == 1:
            out_shape = None
        else:
            return None
        layers = list(seq)  # every position, a module used twice included
        # hooked already: the compiled template (a copy) runs the hooks, eagerly the
        # members do (a hook added later is declined eagerly by usable)
        if not layers or type(layers[0]) is not nn.Linear or any(map(_altered, (seq, *layers))):
            return None
        names = list(seq._modules)
        position = {key: i for i, key in enumerate(keys)}
        steps, used, seen = [], set(), set()
        for name, layer in zip(names, layers, strict=True):
            if type(layer) is nn.Linear:
                if id(layer) in seen:  # tied weights
                    return None
                seen.add(id(layer))
                weight = position.get(("module", name, "weight"))
                bias = position.get(("module", name, "bias")) if layer.bias is not None else None
                if weight is None or (layer.bias is not None and bias is None):
                    return None
                steps.append(("linear", weight, bias))
                used.update(p for p in (weight, bias) if p is not None)
            elif type(layer) in _ELEMENTWISE:
                steps.append(("act", layer))
            else:
                return None
        if len(used) != len(keys):
            return None
        signature = _layer_signature(layers)
        for other in members or ():
            if not (
                _is_plain_tdmodule(other)
                and other.in_keys == network.in_keys
                and other.out_keys == network.out_keys
                and type(other.module) is type(seq)
                and not any(map(_altered, (other.module, *other.module)))
                and _layer_signature(other.module) == signature
                and getattr(other.module, "out_features", None)
                == getattr(seq, "out_features", None)
            ):
                return None
        return cls(network, seq, steps, out_shape)

    def usable(self, network: nn.Module, compiling: bool) -> bool:
        """Whether member 0 is still the network planned for (the same layers, of the
        same classes, no ``forward`` replaced on an instance) with, eagerly, no hook to
        honour. Compiled, hooks are not consulted: a network hooked when the loss was
        built has no plan, and a hook added later reaches the eager calls only, as with
        the compiled template (:meth:`__call__` calls the activations' class
        ``forward``)."""
        seq = self.sequential
        if not (
            network is self.network
            and network.module is seq
            and _is_plain_tdmodule(network)
            and "forward" not in seq.__dict__
            and tuple(seq) == self.children
            and tuple(map(type, self.children)) == self.types
        ):
            return False
        # loops rather than any() over generators: this runs at every ensemble call
        for m in self.children:
            if "forward" in m.__dict__:
                return False
        return compiling or not (_global_hooks() or _hooked(seq, *self.children))

    def macs(self, tensors: list[torch.Tensor], inputs: list[torch.Tensor]) -> int:
        """Multiply-adds of the largest layer product for one member on ``inputs``."""
        return inputs[0].shape[:-1].numel() * self.largest

    def members(
        self,
        views: list[Sequence[torch.Tensor]],
        inputs: list[torch.Tensor],
        rows=None,
        reduce: Literal["min"] | None = None,
    ) -> torch.Tensor:
        """The outputs of the members ``rows`` (every member by default), each by its own
        products on its row of the stacks, stacked: ``[len(rows), *B, ...]``; with
        ``reduce="min"``, their elementwise minimum ``[*B, ...]`` instead (folded with
        ``torch.minimum``, no stack).

        ``views`` holds each stack unbound along its first dim (``t.unbind(0)``: the
        backward of an online stack's unbind stacks the members' gradients). The products
        of the member calls (one ``addmm`` per member and layer, the same values to the
        bit), without binding the members' modules to views and calling them, the inputs
        concatenated once for all members."""
        x = _joined(inputs)

        def member(i: int) -> torch.Tensor:
            def product(h, weight, bias):
                return F.linear(h, views[weight][i], None if bias is None else views[bias][i])

            return self._run(x, product)

        members = range(len(views[0])) if rows is None else rows
        if reduce == "min":
            outputs = iter(members)
            out = member(next(outputs))
            for i in outputs:
                out = torch.minimum(out, member(i))
            return self._shaped(out)
        return self._shaped(torch.stack([member(i) for i in members]))

    def __call__(self, tensors: list[torch.Tensor], inputs: list[torch.Tensor]) -> torch.Tensor:
        """Every member's output on ``inputs``, stacked: ``[N, *B, ...]``."""
        x = _joined(inputs)
        members = tensors[0].shape[0]

        def product(h, weight, bias):
            w = tensors[weight].transpose(1, 2)
            return (
                torch.bmm(h, w) if bias is None else torch.baddbmm(tensors[bias].unsqueeze(1), h, w)
            )

        h = self._run(x.reshape(1, -1, x.shape[-1]).expand(members, -1, -1), product)
        if self.copy_out:
            h = h.clone()
        return self._shaped(h.view(members, *x.shape[:-1], h.shape[-1]))

    def _run(self, h: torch.Tensor, product) -> torch.Tensor:
        """``h`` through the layers: each linear one by ``product(h, weight position,
        bias position or None)``, each activation by its class's forward (its module's
        hooks were declined eagerly by :meth:`usable`, and never run compiled, where only
        the stacks are traced)."""
        for step in self.steps:
            if step[0] == "act":
                layer = step[1]
                # ReLU, the usual case, as its forward computes it (in place or not, the
                # same values), without its two Python frames
                h = torch.relu(h) if type(layer) is nn.ReLU else type(layer).forward(layer, h)
            else:
                h = product(h, step[1], step[2])
        return h

    def _shaped(self, out: torch.Tensor) -> torch.Tensor:
        """``out`` (``[..., features]``) with the MLP's ``out_features`` shape."""
        return out if self.out_shape is None else out.view(*out.shape[:-1], *self.out_shape)


def _joined(inputs: list[torch.Tensor]) -> torch.Tensor:
    """The network's inputs concatenated along the last dim, as :class:`~rl.modules.MLP`
    does."""
    return torch.cat(inputs, -1) if len(inputs) > 1 else inputs[0]


def _network_dist(actor: nn.Module, tensordict: TensorDictBase):
    """``actor.get_dist(tensordict)`` without TensorDict writes for the common actor shape.

    The fast path covers a probabilistic sequence of one plain TensorDictModule that
    writes the distribution parameters followed by the distribution module.
    """
    modules = actor.module if isinstance(actor, ProbabilisticTensorDictSequential) else None
    if isinstance(modules, nn.ModuleList) and len(modules) == 2:
        params_module, dist_module = modules
    else:
        params_module = dist_module = None
    if _is_plain_tdmodule(params_module):
        out_keys = params_module.out_keys
        inputs = [tensordict.get(key, None) for key in params_module.in_keys]
        # loops rather than all() over generators: this runs at every sample
        usable = True
        for key in dist_module.in_keys:
            usable = usable and key in out_keys
        for x in inputs:
            usable = usable and x is not None
        if usable:
            outputs = params_module.module(*inputs)
            if isinstance(outputs, torch.Tensor):
                outputs = (outputs,)
            by_key = dict(zip(out_keys, outputs, strict=True))
            kwargs = {
                (name[-1] if isinstance(name, tuple) else name): by_key[key]
                for name, key in zip(dist_module.dist_keys, dist_module.in_keys, strict=True)
            }
            return dist_module.distribution_class(**kwargs, **dict(dist_module.distribution_kwargs))
    return actor.get_dist(tensordict.copy())

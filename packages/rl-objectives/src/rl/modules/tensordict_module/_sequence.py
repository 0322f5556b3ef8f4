"""SafeSequential: a TensorDictSequential whose spec gathers its modules' specs."""

from __future__ import annotations

from typing import Any

from tensordict.nn import TensorDictModuleBase, TensorDictSequential

from rl.core import Composite

from ._common import _SpecMixin

__all__ = ["SafeSequential"]


def _merged_spec(modules: Any) -> Composite:
    spec = Composite()
    for module in modules:
        sub = getattr(module, "spec", None)
        if isinstance(sub, Composite):
            spec.update(sub)
        else:
            for key in getattr(module, "out_keys", ()):
                if key != "_" and key not in spec.keys(True, True):
                    spec[key] = None
    return spec


class SafeSequential(_SpecMixin, TensorDictSequential):
    """A :class:`~tensordict.nn.TensorDictSequential` with a ``spec`` gathered from its modules.

    Args:
        *modules: the modules, run in order on the same tensordict.
        partial_tolerant: if ``True``, the input may lack some in_keys (only the modules
            whose inputs are present run). Defaults to ``False``.
        inplace: as in :class:`~tensordict.nn.TensorDictSequential`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.core import Unbounded
        >>> from rl.modules import SafeModule, SafeSequential
        >>> trunk = SafeModule(
        ...     torch.nn.Linear(3, 8), ["observation"], ["hidden"], spec=Unbounded(8)
        ... )
        >>> head = SafeModule(torch.nn.Linear(8, 2), ["hidden"], ["action"], spec=Unbounded(2))
        >>> seq = SafeSequential(trunk, head)
        >>> sorted(seq.spec.keys())
        ['action', 'hidden']
        >>> seq(TensorDict(observation=torch.randn(5, 3), batch_size=[5]))["action"].shape
        torch.Size([5, 2])
    """

    def __init__(
        self,
        *modules: TensorDictModuleBase,
        partial_tolerant: bool = False,
        inplace: bool | str | None = None,
    ):
        super().__init__(*modules, partial_tolerant=partial_tolerant, inplace=inplace)
        self._spec = _merged_spec(self.module)

"""VmapModule: runs a TensorDict module under ``torch.vmap`` over one batch dim."""

from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase

__all__ = ["VmapModule"]


class VmapModule(TensorDictModuleBase):
    """Maps a TensorDict module over one batch dim of its input with ``torch.vmap``.

    The wrapped module sees one slice of the input at a time (one batch dim fewer), which
    suits modules written for a single agent or a single environment.

    Args:
        module: the TensorDict module to map.
        vmap_dim: the batch dim mapped over (default: the last one).
        mock: loop over the slices and stack the results instead of calling
            ``torch.vmap`` (for modules that vmap cannot trace). Defaults to ``False``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.modules import VmapModule
        >>> first = TensorDictModule(lambda x: x[0], in_keys=["x"], out_keys=["y"])
        >>> td = TensorDict(x=torch.arange(12.0).reshape(4, 3), batch_size=[4])
        >>> VmapModule(first, vmap_dim=0)(td)["y"]
        tensor([0., 3., 6., 9.])
    """

    def __init__(
        self, module: TensorDictModuleBase, vmap_dim: int | None = None, mock: bool = False
    ):
        super().__init__()
        self.in_keys = module.in_keys
        self.out_keys = module.out_keys
        self.module = module
        self.vmap_dim = vmap_dim
        self.mock = mock

    def mock_(self, value: bool = True) -> None:
        """Switches between the loop (``True``) and ``torch.vmap`` (``False``)."""
        self.mock = value

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        if tensordict.ndim == 0:
            raise ValueError("VmapModule needs a tensordict with at least one batch dim")
        dim = self.vmap_dim if self.vmap_dim is not None else tensordict.ndim - 1
        if self.mock:
            out = torch.stack([self.module(part) for part in tensordict.unbind(dim)], dim)
        else:
            out = torch.vmap(self.module, (dim,), (dim,))(tensordict)
        return tensordict.update(out)

"""``DecodeVideoTransform``: lazy video references in, decoded frames out."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from typing import Any

import torch

from ._base import Transform, _missing_key_error
from ._spec_utils import NestedKey

__all__ = ["DecodeVideoTransform"]

_has_av = importlib.util.find_spec("av") is not None


def _video_clip_ref_type() -> type | None:
    """``rl.data.VideoClipRef`` if ``rl.data`` is imported, else None.

    rl-envs does not depend on rl-data. A reference is an instance of a class defined
    in ``rl.data``, so where one exists ``rl.data`` is already imported: looking it up
    among the imported modules identifies references without importing rl-data.
    """
    data = sys.modules.get("rl.data")
    return None if data is None else getattr(data, "VideoClipRef", None)


class DecodeVideoTransform(Transform):
    """Decodes :class:`rl.data.VideoClipRef` entries into frame tensors.

    Meant for the sample path of a replay buffer: the buffer stores references (a few
    integers per step, in a ``LazyStackStorage`` or a ``ListStorage``: the tensor
    storages hold tensors only) and ``rb.sample()`` returns the frames of the sampled
    steps. It
    calls :meth:`VideoClipRef.decode`, which reads each file once per batch and decodes
    a contiguous run of frames in one pass (the windows of a ``SliceSampler``). In an
    env it decodes the references that the env returns, at reset and at each step.
    There is no inverse.

    Decoding uses PyAV (``pip install "rl-data[video]"``) on the CPU; with a CUDA
    ``device`` the frames are moved there after decoding (TorchRL's torchcodec can
    decode on the GPU with NVDEC; PyAV cannot).

    Keyword Args:
        in_keys (sequence of NestedKey): the entries holding the references.
        out_keys (sequence of NestedKey, optional): where to write the frames.
            Default: ``in_keys`` (the references are replaced).
        device (torch.device or str, optional): the device of the frames. Default: the
            reference's ``out_device``, else its device, else CPU.
        dtype (torch.dtype, optional): the dtype of the frames. Default: the
            reference's ``out_dtype``, else ``torch.uint8``.

    Raises:
        TypeError: ``in_keys`` is None; at call time, an entry is not a
            ``VideoClipRef`` (the message names the key and the type found).
        ModuleNotFoundError: PyAV is not installed.

    Examples:
        >>> import os, tempfile
        >>> import av, numpy as np, torch
        >>> from tensordict import TensorDict
        >>> from rl.data import LazyStackStorage, ReplayBuffer, SliceSampler, VideoClipRef
        >>> from rl.envs import DecodeVideoTransform
        >>> path = os.path.join(tempfile.mkdtemp(), "clip.mkv")
        >>> with av.open(path, "w") as container:  # 20 gray frames, frame i of level i
        ...     stream = container.add_stream("ffv1", rate=10)
        ...     stream.width, stream.height, stream.pix_fmt = 8, 6, "bgr0"
        ...     for i in range(20):
        ...         image = np.full((6, 8, 3), i, dtype=np.uint8)
        ...         container.mux(stream.encode(av.VideoFrame.from_ndarray(image)))
        ...     container.mux(stream.encode())
        >>> data = TensorDict(
        ...     {"frame": VideoClipRef(path), "episode": torch.zeros(20, dtype=torch.long)},
        ...     batch_size=[20],
        ... )
        >>> rb = ReplayBuffer(
        ...     storage=LazyStackStorage(20),
        ...     sampler=SliceSampler(slice_len=4, traj_key="episode"),
        ...     batch_size=8,
        ...     transform=DecodeVideoTransform(in_keys=["frame"], out_keys=["pixels"]),
        ... )
        >>> _ = rb.extend(data)
        >>> sample = rb.sample()
        >>> sample["pixels"].shape
        torch.Size([8, 3, 6, 8])
        >>> bool((sample["pixels"][:, 0, 0, 0] == sample["frame"].frame_index).all())
        True
    """

    invertible = False

    def __init__(
        self,
        *,
        in_keys: Sequence[NestedKey],
        out_keys: Sequence[NestedKey] | None = None,
        device: Any = None,
        dtype: Any = None,
    ) -> None:
        if in_keys is None:
            raise TypeError("DecodeVideoTransform needs in_keys, got None")
        if not _has_av:
            raise ModuleNotFoundError(
                'DecodeVideoTransform decodes with PyAV: pip install "rl-data[video]"'
            )
        if out_keys is None:
            out_keys = list(in_keys)
        super().__init__(in_keys=in_keys, out_keys=out_keys)
        self.device = device
        self.dtype = dtype

    def _call(self, next_tensordict):
        # the key is named in the error, so the base loop is not reused as is
        ref_type = _video_clip_ref_type()
        for in_key, out_key in zip(self.in_keys, self.out_keys):
            value = next_tensordict.get(in_key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise _missing_key_error(self, in_key, next_tensordict)
            if ref_type is None or not isinstance(value, ref_type):
                raise TypeError(
                    f"DecodeVideoTransform expects a VideoClipRef at {in_key!r}, "
                    f"got {type(value).__name__}"
                )
            next_tensordict.set(out_key, value.decode(device=self.device, dtype=self.dtype))
        return next_tensordict

    def _apply_transform(self, value: Any) -> torch.Tensor:
        ref_type = _video_clip_ref_type()
        if ref_type is None or not isinstance(value, ref_type):
            raise TypeError(
                f"DecodeVideoTransform expects a VideoClipRef, got {type(value).__name__}"
            )
        return value.decode(device=self.device, dtype=self.dtype)

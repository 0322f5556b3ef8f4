"""Recording transforms: ``VideoRecorder`` (frames to an mp4 or a logger),
``PixelRenderTransform`` (the env's ``render()`` output as an observation) and
``TensorDictRecorder`` (a stack of step outputs saved to a file)."""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import NonTensorData, TensorDictBase

from rl.core import NonTensor, Unbounded
from rl.core.files import remove_stale_temporaries, temporary_path

from ._base import ObservationTransform, Transform, _missing_key_error
from ._episode import _no_io_pairs
from ._spec_utils import NestedKey

__all__ = ["PixelRenderTransform", "TensorDictRecorder", "VideoRecorder", "write_video"]

_has_av = importlib.util.find_spec("av") is not None


def _to_hwc_uint8(frame: torch.Tensor) -> torch.Tensor:
    """One frame ``[C, H, W]`` / ``[H, W, C]`` (float in [0, 1] or uint8) to ``[H, W, 3]`` uint8."""
    if frame.ndim == 2:
        frame = frame.unsqueeze(-1)
    if frame.shape[-1] not in (1, 3, 4) and frame.shape[-3] in (1, 3, 4):
        frame = frame.permute(1, 2, 0)
    if frame.is_floating_point():
        frame = (frame.clamp(0, 1) * 255).round()
    frame = frame.to(torch.uint8)
    if frame.shape[-1] == 1:
        frame = frame.expand(*frame.shape[:-1], 3)
    elif frame.shape[-1] == 4:
        frame = frame[..., :3]
    return frame


def write_video(frames: torch.Tensor, path: str | os.PathLike, fps: int = 30) -> Path:
    """Encodes frames ``[T, H, W, 3]`` uint8 as an H.264 (or MPEG-4) mp4 file.

    Args:
        frames: the video.
        path: the output file.
        fps: frames per second.

    Raises:
        ImportError: PyAV is not installed (``pip install "rl-envs[video]"``).
        ValueError: ``frames`` is not ``[T, H, W, 3]`` uint8 with ``T >= 1``.
    """
    if not _has_av:
        raise ImportError('VideoRecorder needs PyAV: pip install "rl-envs[video]"')
    import av

    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != torch.uint8 or not len(frames):
        raise ValueError(
            f"write_video expects uint8 frames [T, H, W, 3] with T >= 1, got shape "
            f"{tuple(frames.shape)} and dtype {frames.dtype}"
        )
    # yuv420p needs even sizes
    H, W = frames.shape[1], frames.shape[2]
    if H % 2 or W % 2:
        frames = torch.nn.functional.pad(frames.permute(0, 3, 1, 2), (0, W % 2, 0, H % 2)).permute(
            0, 2, 3, 1
        )
    array = np.ascontiguousarray(frames.cpu().numpy())
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    codec = "libx264" if "libx264" in av.codecs_available else "mpeg4"
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream(codec, rate=fps)
        stream.height, stream.width = array.shape[1], array.shape[2]
        stream.pix_fmt = "yuv420p"
        for img in array:
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def _make_video_grid(frames: torch.Tensor) -> torch.Tensor:
    """Tiles ``[N, H, W, 3]`` frames in a grid of ``ceil(sqrt(N))`` columns (as TorchRL)."""
    n, h, w, c = frames.shape
    ncols = math.ceil(math.sqrt(n))
    nrows = math.ceil(n / ncols)
    # blank tiles fill the last row; tile (row, col) lands at rows row*h.., cols col*w..
    tiles = torch.cat([frames, frames.new_zeros(nrows * ncols - n, h, w, c)])
    return tiles.reshape(nrows, ncols, h, w, c).transpose(1, 2).reshape(nrows * h, ncols * w, c)


def _center_crop(frame: torch.Tensor, size: int) -> torch.Tensor:
    """The centered ``size x size`` window of ``[H, W, 3]`` frames, zero-padded where the
    frame is smaller (torchvision's ``center_crop``, which TorchRL calls)."""
    h, w = frame.shape[-3], frame.shape[-2]
    pad_h, pad_w = max(size - h, 0), max(size - w, 0)
    if pad_h or pad_w:
        frame = torch.nn.functional.pad(
            frame.movedim(-1, -3),
            (pad_w // 2, pad_w - pad_w // 2, pad_h // 2, pad_h - pad_h // 2),
        ).movedim(-3, -1)
        h, w = frame.shape[-3], frame.shape[-2]
    top, left = int(round((h - size) / 2.0)), int(round((w - size) / 2.0))
    return frame[..., top : top + size, left : left + size, :]


class VideoRecorder(ObservationTransform):
    """Records the ``"pixels"`` frames an env produces and writes them as a video on ``dump()``.

    Frames (``[H, W, C]`` uint8 or ``[C, H, W]`` floats in [0, 1]) are collected at reset
    and at every ``skip``-th step. ``dump()`` hands the video ``[T, H, W, 3]`` to
    ``logger.log_video(tag, video, **kwargs)`` when a logger is given, and otherwise (``logger
    =None``, rl's addition) writes ``<video_dir>/<tag>_<n>.mp4`` with PyAV.

    Args:
        logger: an object with ``log_video(name, video, **kwargs)``, or ``None`` to write mp4
            files.
        tag: the video name.
        in_keys: frame keys (default ``["pixels"]``).
        skip: keep one frame every ``skip`` steps; ``None`` (default, as TorchRL): 1, or 2
            in an env without batch dims.
        center_crop: crop the frames to their centered ``center_crop x center_crop`` window
            (zero-padded where a frame is smaller).
        make_grid: tile the frames of a batch (of envs) in one grid frame
            (``ceil(sqrt(N))`` columns); otherwise each goes into the video in turn.
            ``None`` (default): a grid in an env, not on data.
        out_keys: where each frame is also written (default: ``in_keys``, nothing copied).
        fps: frames per second: passed to ``log_video`` when given, and the mp4's rate
            (30 when ``None``).
        max_frames: the most frames kept until ``dump()``; later frames are not recorded
            (as TorchRL).
        dump_on_done: ``dump()`` on its own at a step where every ``"done"`` entry is
            ``True`` (every sub-env of a batch).
        video_dir: folder of the mp4 files when ``logger`` is ``None`` (default: the
            current directory).
        **kwargs: more keyword arguments of ``logger.log_video``.

    Raises:
        ValueError: ``skip``, ``fps``, ``center_crop`` or ``max_frames`` is not a positive int,
            or ``kwargs`` without a logger.
        ImportError: on ``dump()`` without a logger when PyAV is missing.

    Examples:
        >>> import tempfile, torch
        >>> from tensordict import TensorDict
        >>> recorder = VideoRecorder(None, "demo", video_dir=tempfile.mkdtemp())
        >>> _ = recorder(TensorDict(pixels=torch.rand(5, 3, 32, 32), batch_size=[5]))
        >>> path = recorder.dump()
        >>> path.name, path.stat().st_size > 0
        ('demo_0.mp4', True)
    """

    def __init__(
        self,
        logger,
        tag: str,
        in_keys: Sequence[NestedKey] | None = None,
        skip: int | None = None,
        center_crop: int | None = None,
        make_grid: bool | None = None,
        out_keys: Sequence[NestedKey] | None = None,
        fps: int | None = None,
        max_frames: int | None = None,
        dump_on_done: bool = False,
        *,
        video_dir: str | os.PathLike | None = None,
        **kwargs,
    ):
        for name, v in (
            ("skip", skip),
            ("fps", fps),
            ("center_crop", center_crop),
            ("max_frames", max_frames),
        ):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"VideoRecorder {name} must be a positive int, got {v!r}")
        if kwargs and logger is None:
            raise ValueError(
                f"VideoRecorder keyword arguments {sorted(kwargs)} are passed to "
                "logger.log_video; no logger was given (logger=None writes mp4 files)"
            )
        in_keys = ["pixels"] if in_keys is None else in_keys
        super().__init__(in_keys, in_keys if out_keys is None else out_keys)
        self.logger = logger
        self.tag = tag
        self._skip = skip
        self.center_crop = center_crop
        self._make_grid = make_grid
        self.fps = fps
        self.video_kwargs = dict(kwargs) if fps is None else {**kwargs, "fps": fps}
        self.video_dir = Path(video_dir) if video_dir is not None else Path.cwd()
        self.max_frames = max_frames
        self.dump_on_done = bool(dump_on_done)
        self.frames: list[torch.Tensor] = []
        self._count = 0
        self._dumps = 0

    @property
    def skip(self) -> int:
        if self._skip is None:
            parent = self.parent
            return 2 if parent is not None and not len(parent.batch_size) else 1
        return self._skip

    @skip.setter
    def skip(self, value: int | None) -> None:
        self._skip = value

    @property
    def make_grid(self) -> bool:
        if self._make_grid is None:
            return self.parent is not None
        return self._make_grid

    @make_grid.setter
    def make_grid(self, value: bool | None) -> None:
        self._make_grid = value

    @property
    def has_step(self) -> bool:
        return True

    def _keep(self, frame: torch.Tensor) -> None:
        if self.max_frames is None or len(self.frames) < self.max_frames:
            self.frames.append(frame)

    def _record(self, value: torch.Tensor, nbatch: int) -> None:
        frame = value.detach().cpu()
        frames = [_to_hwc_uint8(f) for f in frame.reshape(-1, *frame.shape[nbatch:])]
        if self.center_crop:
            frames = [_center_crop(f, self.center_crop) for f in frames]
        if not nbatch:
            self._keep(frames[0])
        elif self.make_grid:
            self._keep(_make_video_grid(torch.stack(frames)))
        else:
            for f in frames:
                self._keep(f)

    def _copy_out(self, tensordict, in_key, out_key, value) -> None:
        if out_key != in_key:
            tensordict.set(out_key, value)

    def _call(self, next_tensordict):
        self._count += 1
        record = not self._count % self.skip
        for in_key, out_key in zip(self.in_keys, self.out_keys, strict=True):
            value = next_tensordict.get(in_key, None)
            if value is None:
                if self.missing_tolerance:
                    continue
                raise _missing_key_error(self, in_key, next_tensordict)
            if record:
                self._record(value, next_tensordict.batch_dims)
            self._copy_out(next_tensordict, in_key, out_key, value)
        return next_tensordict

    def _step(self, tensordict, next_tensordict):
        next_tensordict = self._call(next_tensordict)
        if self.dump_on_done and self._all_done(next_tensordict):
            self.dump()
        return next_tensordict

    def _all_done(self, next_tensordict) -> bool:
        parent = self.parent
        keys = (
            ["done"]
            if parent is None
            else [k for k in parent.done_keys if (k if isinstance(k, str) else k[-1]) == "done"]
        )
        dones = [next_tensordict.get(k, None) for k in keys]
        dones = [d for d in dones if d is not None]
        return bool(dones) and all(bool(d.all()) for d in dones)

    def _reset(self, tensordict, tensordict_reset):
        self._count = 0
        for in_key, out_key in zip(self.in_keys, self.out_keys, strict=True):
            value = tensordict_reset.get(in_key, None)
            if value is not None:
                self._record(value, tensordict_reset.batch_dims)
                self._copy_out(tensordict_reset, in_key, out_key, value)
        return tensordict_reset

    def forward(self, tensordict):
        """Records the frames of a batch of data (its leading dims are frames in turn, or
        one grid with ``make_grid=True``)."""
        for in_key, out_key in zip(self.in_keys, self.out_keys, strict=True):
            value = tensordict.get(in_key, None)
            if value is None:
                raise _missing_key_error(self, in_key, tensordict)
            if self.make_grid:
                self._record(value, tensordict.batch_dims)
            else:
                for frame in value.reshape(-1, *value.shape[tensordict.batch_dims :]):
                    self._record(frame, 0)
            self._copy_out(tensordict, in_key, out_key, value)
        return tensordict

    def dump(self, suffix: str | None = None) -> Path | None:
        """Writes (or logs) the collected frames and clears them.

        Returns:
            the path of the written mp4 (``None`` when logged or when there is no frame).
        """
        if not self.frames:
            return None
        video = torch.stack(self.frames, 0)
        self.frames = []
        if self.logger is not None:
            tag = self.tag if suffix is None else f"{self.tag}_{suffix}"
            self.logger.log_video(tag, video, **self.video_kwargs)
            return None
        name = f"{self.tag}_{suffix if suffix is not None else self._dumps}.mp4"
        self._dumps += 1
        return write_video(video, self.video_dir / name, fps=self.fps or 30)

    def _repr_args(self) -> str:
        return f"tag={self.tag!r}, keys={self.in_keys}, skip={self.skip}"


class TensorDictRecorder(Transform):
    """Keeps every ``skip``-th step output of an env and saves their stack on ``dump()``.

    The outputs of ``reset`` and ``step`` (the ``"next"`` entries) are counted; every
    ``skip``-th one is kept (a copy, restricted to ``in_keys`` when given). ``dump()``
    stacks them and writes ``<out_file_base>[_<suffix>]_tensordict.t`` atomically.

    The file holds ``{"batch_size": [...], "tensordict": td.to_dict()}`` (tensors and
    plain containers) rather than TorchRL's pickled ``TensorDict``, so that it loads with
    ``torch.load(path, weights_only=True)``; rebuild it with
    ``TensorDict(data["tensordict"], batch_size=data["batch_size"])``. TorchRL's
    ``dump`` reads a ``tag`` attribute the class never sets (it raises); the file name
    here starts with ``out_file_base``.

    Args:
        out_file_base: the path prefix of the file.
        skip_reset: leave the first kept output (usually the reset one) out of the file.
        skip: keep one output every ``skip``.
        in_keys: the entries kept (default: all of them).

    Raises:
        ValueError: ``skip`` is not a positive int.

    Examples:
        >>> import tempfile, os, torch
        >>> from tensordict import TensorDict
        >>> from rl.envs import PendulumEnv, TransformedEnv
        >>> base = os.path.join(tempfile.mkdtemp(), "run")
        >>> env = TransformedEnv(PendulumEnv(), TensorDictRecorder(base, skip=1, in_keys=["reward"]))
        >>> _ = env.rollout(3)
        >>> path = env.transform.dump()
        >>> data = torch.load(path, weights_only=True)
        >>> TensorDict(data["tensordict"], batch_size=data["batch_size"])["reward"].shape
        torch.Size([3, 1])
    """

    def __init__(
        self,
        out_file_base: str,
        skip_reset: bool = True,
        skip: int = 4,
        in_keys: Sequence[str] | None = None,
    ) -> None:
        if isinstance(skip, bool) or not isinstance(skip, int) or skip < 1:
            raise ValueError(f"TensorDictRecorder skip must be a positive int, got {skip!r}")
        super().__init__(in_keys=[] if in_keys is None else in_keys)
        self.out_file_base = out_file_base
        self.skip_reset = skip_reset
        self.skip = skip
        self.iter = 0
        self.count = 0
        self.td: list[TensorDictBase] = []

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        self.count += 1
        if not self.count % self.skip:
            kept = next_tensordict
            if self.in_keys:  # (a reset output has no reward: what is there is kept)
                kept = next_tensordict.select(*self.in_keys, strict=False)
            self.td.append(kept.clone())
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def dump(self, suffix: str | None = None) -> Path | None:
        """Writes the kept outputs and starts a new record.

        Args:
            suffix: appended to ``out_file_base`` (after an underscore).

        Returns:
            the path written, or ``None`` when nothing was kept (no file is written).
        """
        tds = self.td[1:] if self.skip_reset else self.td
        self.td = []
        self.count = 0
        if not tds:
            return None
        stacked = torch.stack(tds, 0).contiguous()
        base = self.out_file_base if suffix is None else f"{self.out_file_base}_{suffix}"
        path = Path(f"{base}_tensordict.t")
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
        tmp = temporary_path(path)
        try:
            torch.save(
                {"batch_size": list(stacked.batch_size), "tensordict": stacked.to_dict()}, tmp
            )
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        self.iter += 1
        return path


class PixelRenderTransform(Transform):
    """Writes what the env's ``render()`` returns as an observation (``"pixels"``).

    An alternative to ``from_pixels=True`` for envs that can render (a gymnasium env made
    with ``render_mode="rgb_array"``, whose :class:`~rl.envs.GymWrapper` ``render()``
    returns the frame). At each reset and step the transform calls the method
    ``render_method`` of the env below it (with ``**kwargs``, and the step output when
    ``pass_tensordict=True``), applies ``preproc`` and writes the result under
    ``out_keys[0]``. Its spec is read from one rendered frame (the env is reset once when
    the specs are built). Inside a :class:`~rl.envs.ParallelEnv` worker each sub-env
    renders its own frame.

    Args:
        out_keys: one key where the frame goes (default ``["pixels"]``).
        preproc: a function applied to the rendered array (to reshape it, copy it...).
        as_non_tensor: write the frame as non-tensor data (no shape constraint); by
            default, inferred from the first frame: non-tensor when a batched env
            renders one ``[H, W, 3]`` image for the whole batch.
        render_method: the name of the env's render method.
        pass_tensordict: pass the output tensordict to the render method (stateless
            envs render from it).
        **kwargs: keyword arguments of the render method.

    Raises:
        ValueError: not one out key, a ``mode`` other than on/off in :meth:`switch`, or
            an env without a callable ``render_method``.
        RuntimeError: a rendered array that does not fit the output tensordict.

    Examples:
        >>> from rl.envs import GymEnv
        >>> env = GymEnv("CartPole-v1", render_mode="rgb_array")
        >>> env = env.append_transform(PixelRenderTransform())
        >>> td = env.rollout(3)
        >>> td["next", "pixels"].shape, td["next", "pixels"].dtype
        (torch.Size([3, 400, 600, 3]), torch.uint8)
        >>> env.transform.switch("off")
        >>> "pixels" in env.rollout(2)["next"].keys()
        False
    """

    def __init__(
        self,
        out_keys: list[NestedKey] | None = None,
        preproc: Callable[[np.ndarray | torch.Tensor], np.ndarray | torch.Tensor] | None = None,
        as_non_tensor: bool | None = None,
        render_method: str = "render",
        pass_tensordict: bool = False,
        **kwargs: Any,
    ) -> None:
        if out_keys is None:
            out_keys = ["pixels"]
        elif isinstance(out_keys, str | tuple):
            out_keys = [out_keys]
        if len(out_keys) != 1:
            raise ValueError(
                f"PixelRenderTransform writes one frame: expected one out_key, got {out_keys}"
            )
        super().__init__(in_keys=[], out_keys=out_keys)
        self.preproc = preproc
        self.as_non_tensor = as_non_tensor
        self.render_method = render_method
        self.pass_tensordict = pass_tensordict
        self.kwargs = kwargs
        self._enabled = True

    # the frame is not a map of an input entry
    _on_keys_changed = _no_io_pairs

    @property
    def has_step(self) -> bool:
        return True

    def set_container(self, container) -> None:
        super().set_container(container)
        parent = self.parent
        if parent is not None:
            method = getattr(parent, self.render_method, None)
            if not callable(method):
                raise ValueError(
                    f"PixelRenderTransform needs the env's {self.render_method!r} method, "
                    f"which {type(parent).__name__} does not have (got {method!r})"
                )

    def _render(self, tensordict: TensorDictBase) -> Any:
        method = getattr(self.parent, self.render_method)
        if self.pass_tensordict:
            array = method(tensordict, **self.kwargs)
        else:
            array = method(**self.kwargs)
        if self.preproc is not None:
            array = self.preproc(array)
        if isinstance(array, list):
            array = (
                np.asarray(array) if isinstance(array[0], np.ndarray) else torch.as_tensor(array)
            )
        return array

    def _call(self, next_tensordict: TensorDictBase) -> TensorDictBase:
        if not self._enabled:
            return next_tensordict
        array = self._render(next_tensordict)
        if self.as_non_tensor is None:
            one_image = array.ndim == 3 and array.shape[-1] == 3
            self.as_non_tensor = bool(one_image and self.parent.batch_size != ())
        key = self.out_keys[0]
        if self.as_non_tensor:
            next_tensordict.set_non_tensor(key, array)
            return next_tensordict
        value = torch.as_tensor(
            np.ascontiguousarray(array) if isinstance(array, np.ndarray) else array
        )
        try:
            next_tensordict.set(
                key, value.to(next_tensordict.device) if next_tensordict.device else value
            )
        except (RuntimeError, ValueError) as err:
            raise RuntimeError(
                f"PixelRenderTransform could not write the rendered array (shape "
                f"{tuple(value.shape)}, dtype {value.dtype}) under {key!r} of a tensordict of "
                f"batch size {tuple(next_tensordict.batch_size)}: adapt preproc, pass "
                "render keyword arguments, or use as_non_tensor=True"
            ) from err
        return next_tensordict

    def _reset(
        self, tensordict: TensorDictBase | None, tensordict_reset: TensorDictBase
    ) -> TensorDictBase:
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec):
        enabled = self._enabled
        self._enabled = True
        try:
            td = self._call(self.parent.reset())
        finally:
            self._enabled = enabled
        key = self.out_keys[0]
        value = td.get(key)
        if isinstance(value, NonTensorData):
            spec = NonTensor(shape=value.shape, device=observation_spec.device)
        else:
            spec = Unbounded(shape=value.shape, dtype=value.dtype, device=value.device)
        observation_spec[key] = spec
        return observation_spec

    def switch(self, mode: str | bool | None = None) -> None:
        """Turns the rendering on or off (``"on"``, ``"off"``, a bool; by default the
        opposite of the current state)."""
        if mode is None:
            mode = not self._enabled
        if not isinstance(mode, bool):
            if mode not in ("on", "off"):
                raise ValueError(f"mode must be 'on', 'off' or a bool, got {mode!r}")
            mode = mode == "on"
        self._enabled = mode

    @property
    def enabled(self) -> bool:
        """Whether frames are rendered."""
        return self._enabled

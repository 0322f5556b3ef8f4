"""Lazy references to frames of encoded video files, decoded with PyAV on demand.

A :class:`VideoClipRef` stores where frames live (the video files and, per frame, a file
id and a position in that file), never the pixels: a replay buffer of references costs a
few integers per step, and the frames are decoded when a batch is sampled
(:class:`rl.envs.DecodeVideoTransform`) or when :meth:`VideoClipRef.decode` is called.

Decoding uses PyAV (``pip install "rl-data[video]"``), which ships its own FFmpeg build.
TorchRL decodes with torchcodec, which needs the system's FFmpeg shared libraries and
offers NVDEC decoding on a GPU; here frames are always decoded on the CPU and then moved
to the requested device. ``av`` is imported only when a file is opened.

Open files are kept in a small least-recently-used cache per process (see
:func:`set_video_decoder_cache_size`); a reference never holds one, so references pickle
and travel to worker processes, which open their own files.
"""

from __future__ import annotations

import bisect
import importlib.util
import os
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorClass

__all__ = ["VideoClipRef", "clear_video_decoder_cache", "set_video_decoder_cache_size"]

_has_av = importlib.util.find_spec("av") is not None
_AV_MISSING = 'decoding video frames needs PyAV: pip install "rl-data[video]"'


# ------------------------------------------------------------------ open files
class _VideoReader:
    """One open video stream: its container, the presentation times of its frames in
    display order, and those of its keyframes (where a decode can start).

    The frame times come from one pass over the file's packets (no decoding), so frame
    ``i`` is the ``i``-th frame in display order whatever the container's metadata says
    (some containers, Matroska for one, do not store a frame count).
    """

    def __init__(self, source: str, stream: int | None) -> None:
        if not _has_av:
            raise ModuleNotFoundError(_AV_MISSING)
        import av

        if isinstance(source, str) and "://" not in source and not os.path.exists(source):
            raise FileNotFoundError(f"video file {source!r} does not exist")
        try:
            container = av.open(source)
        except av.error.FFmpegError as err:
            raise RuntimeError(f"could not open video file {source!r}: {err}") from err
        if stream is None:
            if not container.streams.video:
                container.close()
                raise ValueError(f"video file {source!r} has no video stream")
            video = container.streams.video[0]
        else:
            if not 0 <= stream < len(container.streams):
                count = len(container.streams)
                container.close()
                raise ValueError(
                    f"stream {stream} does not exist in {source!r}, which has {count} streams"
                )
            video = container.streams[stream]
            if video.type != "video":
                container.close()
                raise ValueError(f"stream {stream} of {source!r} is {video.type}, not video")
        times, keys, starts = [], {}, []
        for packet in container.demux(video):
            time = packet.pts if packet.pts is not None else packet.dts
            if time is None or packet.size == 0:
                continue  # the demuxer's final flush packet
            times.append(time)
            # a seek to a packet's decode time lands on it in every container (AVI, for
            # one, seeks by decode time, which is earlier than the display time)
            start = min(time, packet.dts) if packet.dts is not None else time
            starts.append(start)
            if packet.is_keyframe:
                keys[time] = start
        self.source = source
        self.container = container
        self.stream = video
        self._stream_index = video.index
        self._rate = video.average_rate
        self._time_base = video.time_base
        self._frame_shape = (3, video.codec_context.height, video.codec_context.width)
        # set once the cache no longer holds this reader: the read running then closes it
        self.dropped = False
        self.times = sorted(times)
        self.keyframes = sorted(keys) or self.times[:1]
        self.seek_targets = keys or {time: min(starts) for time in self.times[:1]}
        self.first_seek = min(starts, default=0)
        self.lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.times)

    @property
    def average_fps(self) -> float:
        """Frames per second: the stream's average rate, or the mean over its frame times."""
        rate = self._rate
        if rate:
            return float(rate)
        if len(self.times) < 2:
            raise ValueError(f"cannot infer the frame rate of {self.source!r}: pass fps")
        span = (self.times[-1] - self.times[0]) * float(self._time_base)
        return (len(self.times) - 1) / span

    @property
    def frame_shape(self) -> tuple[int, int, int]:
        """``(3, height, width)`` of the decoded RGB frames."""
        return self._frame_shape

    def _keyframe_before(self, time: int) -> int:
        return self.keyframes[max(bisect.bisect_right(self.keyframes, time) - 1, 0)]

    def read(self, indices: list[int]) -> torch.Tensor:
        """Frames at sorted, distinct ``indices`` as a uint8 tensor ``[n, 3, H, W]``.

        Each read seeks to the keyframe at or before its first frame and decodes
        forward; a wanted frame joins the current read unless reaching it means decoding
        frames past a keyframe that a fresh seek would skip, so a contiguous run of
        indices is one read.
        """
        count = len(self.times)
        for index in indices:
            if not 0 <= index < count:
                raise IndexError(
                    f"frame index {index} is out of range for video {self.source!r}, "
                    f"which has {count} frames (valid indices: 0 to {count - 1})"
                )
        reads: list[tuple[int, list[int]]] = []
        for index in indices:
            key = self._keyframe_before(self.times[index])
            # decoding on from the previous wanted frame passes no frame that a seek to
            # ``key`` would skip: the keyframe is at or before the previous one's successor
            if reads and key <= self._next_time(reads[-1][1][-1]):
                reads[-1][1].append(index)
            else:
                reads.append((key, [index]))
        wanted = {self.times[index]: position for position, index in enumerate(indices)}
        out: list[torch.Tensor | None] = [None] * len(indices)
        try:
            with self.lock:
                if self.container is None:  # closed when the cache dropped it: reopen it
                    import av

                    self.container = av.open(self.source)
                    self.stream = self.container.streams[self._stream_index]
                for key, group in reads:
                    self._decode_into(out, wanted, self.seek_targets[key], self.times[group[-1]])
                missing = [index for index, frame in zip(indices, out) if frame is None]
                if missing:
                    # a keyframe flag the decoder did not honour (a damaged or oddly muxed
                    # file): decode those frames from the start of the stream instead
                    self._decode_into(out, wanted, self.first_seek, self.times[missing[-1]])
        finally:
            # checked once the lock is free: a cache that dropped the reader meanwhile
            # could not close it then, and a read still running closes it after itself
            if self.dropped:
                self.release()
        missing = [index for index, frame in zip(indices, out) if frame is None]
        if missing:
            raise RuntimeError(
                f"the decoder of {self.source!r} produced no frame at indices {missing}"
            )
        return torch.stack(out).permute(0, 3, 1, 2).contiguous()  # type: ignore[arg-type]

    def _decode_into(self, out: list, wanted: dict, seek: int, last: int) -> None:
        """Seeks to ``seek`` and decodes up to time ``last``, keeping the ``wanted`` frames
        (``{time: position in out}``) that are still missing."""
        self.container.seek(seek, stream=self.stream, backward=True, any_frame=False)
        for frame in self.container.decode(self.stream):
            time = frame.pts if frame.pts is not None else frame.dts
            position = wanted.get(time)
            if position is not None and out[position] is None:
                out[position] = torch.from_numpy(frame.to_ndarray(format="rgb24"))
            if time is not None and time >= last:
                break

    def _next_time(self, index: int) -> int:
        """The time of the frame after ``index`` (the last frame's own time at the end)."""
        return self.times[min(index + 1, len(self.times) - 1)]

    def close(self) -> None:
        """Closes the file now: a PyAV container is part of a reference cycle (its streams
        point back at it), so dropping it leaves the file open until the cyclic GC runs."""
        if self.container is not None:
            self.container.close()
            self.container = None

    def release(self) -> None:
        """The cache drops this reader: it is closed now, or by the read running on it."""
        self.dropped = True
        if self.lock.acquire(blocking=False):
            try:
                self.close()
            finally:
                self.lock.release()


# One cache per process: a reader holds an open file, which neither pickles nor survives a
# fork safely (parent and child would share its offset), so references never hold one and
# a forked child starts with an empty cache.
_DECODER_CACHE: OrderedDict[tuple, _VideoReader] = OrderedDict()
_DECODER_CACHE_LOCK = threading.Lock()
_DECODER_CACHE_MAXSIZE = 8


def _reset_cache_after_fork() -> None:
    global _DECODER_CACHE, _DECODER_CACHE_LOCK
    _DECODER_CACHE = OrderedDict()
    _DECODER_CACHE_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_cache_after_fork)


def set_video_decoder_cache_size(maxsize: int) -> None:
    """Sets how many video files each process keeps open for decoding.

    The cache is keyed by ``(source, stream)``; past ``maxsize`` entries the least
    recently used file is dropped (and closed once no decode still uses it). ``0``
    opens the file anew at every decode.

    Args:
        maxsize (int): the number of open files to keep, ``>= 0`` (8 by default).

    Raises:
        ValueError: ``maxsize`` is negative.
    """
    global _DECODER_CACHE_MAXSIZE
    maxsize = int(maxsize)
    if maxsize < 0:
        raise ValueError(f"maxsize must be >= 0, got {maxsize}")
    with _DECODER_CACHE_LOCK:
        _DECODER_CACHE_MAXSIZE = maxsize
        while len(_DECODER_CACHE) > maxsize:
            _DECODER_CACHE.popitem(last=False)[1].release()


def clear_video_decoder_cache() -> None:
    """Closes every video file this process keeps open for decoding."""
    with _DECODER_CACHE_LOCK:
        readers = list(_DECODER_CACHE.values())
        _DECODER_CACHE.clear()
    for reader in readers:
        reader.release()


def _get_decoder(source: str, stream: int | None) -> _VideoReader:
    key = (source, stream)
    with _DECODER_CACHE_LOCK:
        reader = _DECODER_CACHE.get(key)
        if reader is not None:
            _DECODER_CACHE.move_to_end(key)
            return reader
    reader = _VideoReader(source, stream)
    dropped = []
    with _DECODER_CACHE_LOCK:
        if _DECODER_CACHE_MAXSIZE > 0:
            _DECODER_CACHE[key] = reader
            while len(_DECODER_CACHE) > _DECODER_CACHE_MAXSIZE:
                dropped.append(_DECODER_CACHE.popitem(last=False)[1])
        else:
            dropped.append(reader)  # not kept: closed now, reopened by a read
    for old in dropped:
        old.release()
    return reader


# ------------------------------------------------------------- field helpers
def _is_path(value: Any) -> bool:
    return isinstance(value, (str, bytes, os.PathLike))


def _as_path(value: Any) -> Any:
    return os.fspath(value) if isinstance(value, os.PathLike) else value


def _flatten(value: Any) -> list:
    """The leaves of a field that stacking may have nested (lists, NonTensorStack)."""
    if _is_path(value):
        return [_as_path(value)]
    if torch.is_tensor(value):
        return value.reshape(-1).tolist()
    if hasattr(value, "tolist"):
        return _flatten(value.tolist())
    if isinstance(value, (list, tuple)):
        return [leaf for element in value for leaf in _flatten(element)]
    return [value]


def _first(value: Any, default: Any = None) -> Any:
    """The value of a per-reference field (the first copy once references are stacked)."""
    leaves = _flatten(value)
    return leaves[0] if leaves else default


def _file_lists(value: Any) -> list[list]:
    """The file tuples a ``sources`` field holds, in row-major order.

    A reference holds one tuple of paths; stacking references, or storing them in a
    replay buffer, nests one copy of the tuple per element.
    """
    if value is None:
        return [[]]
    if _is_path(value):
        return [[_as_path(value)]]
    if hasattr(value, "tolist") and not torch.is_tensor(value):
        return _file_lists(value.tolist())
    children = list(value)
    if all(_is_path(child) for child in children):
        return [[_as_path(child) for child in children]]
    return [files for child in children for files in _file_lists(child)]


def _resolve_paths(sources: Any, file_id: list[int]) -> list:
    """The path of each element, ``sources[file_id[i]]`` for its own file tuple."""
    groups = _file_lists(sources)
    n = len(file_id)
    if len(groups) == 1:
        files = groups[0]
        lists = [files] * n
    elif len(groups) == n:
        lists = groups
    else:
        raise RuntimeError(
            f"VideoClipRef holds {len(groups)} source tuples for {n} frames; "
            "sources and frame_index must describe the same elements"
        )
    paths = []
    for files, fid in zip(lists, file_id):
        if not 0 <= fid < len(files):
            raise IndexError(
                f"file_id {fid} is out of range for sources {tuple(files)!r} ({len(files)} files)"
            )
        paths.append(files[fid])
    return paths


def _bin_frame_index(
    num_frames: int, num_bins: int, frames_per_bin: int | None = None
) -> torch.Tensor:
    """Positions in ``[0, num_frames)`` for ``num_bins`` consecutive, disjoint bins.

    Bin edges are ``round(linspace(0, num_frames, num_bins + 1))``. With
    ``frames_per_bin=None`` each bin gives its middle frame (shape ``[num_bins]``); with
    ``k`` it gives ``k`` frames spread from its first to its last frame (shape
    ``[num_bins, k]``, repeating frames where the bin holds fewer than ``k``).
    """
    if num_bins < 1:
        raise ValueError(f"num_bins must be >= 1, got {num_bins}")
    if num_frames < 1:
        raise ValueError(f"num_frames must be >= 1, got {num_frames}")
    edges = torch.linspace(0, num_frames, num_bins + 1).round().long()
    first = edges[:-1].clamp(0, num_frames - 1)
    last = torch.maximum((edges[1:] - 1).clamp(0, num_frames - 1), first)
    if frames_per_bin is None:
        return ((first + last).float() / 2).round().long()
    k = int(frames_per_bin)
    if k < 1:
        raise ValueError(f"frames_per_bin must be >= 1, got {k}")
    steps = torch.linspace(0, 1, k)
    return (first[:, None].float() + steps * (last - first)[:, None].float()).round().long()


# ------------------------------------------------------------------ the class
class VideoClipRef(TensorClass["nocast"]):
    """A lazy, picklable reference to frames of one or more encoded video files.

    The batch dimensions of a reference are its frames. Each frame is addressed by
    ``file_id`` (an index into the ``sources`` tuple of unique paths) and
    ``frame_index`` (its position in that file, in display order). Indexing, stacking
    and storing references in a replay buffer move these integers only; pixels come
    from :meth:`decode`, which reads each file once per call and decodes a contiguous
    run of frames in one pass.

    In a replay buffer, references go in any storage: a tensor storage
    (:class:`~rl.data.LazyTensorStorage`, :class:`~rl.data.LazyMemmapStorage`) keeps the
    index tensors in its tables and the ``sources`` tuple of each row as non-tensor data.

    Decoding uses PyAV, not torchcodec as in TorchRL: PyAV bundles FFmpeg, whereas
    torchcodec needs the system's FFmpeg libraries. There is no GPU (NVDEC) decoding:
    with a CUDA ``out_device`` frames are decoded on the CPU and then moved.

    Args:
        sources (str, PathLike or tuple of str): the video file, or the tuple of unique
            files that ``file_id`` indexes. A single path becomes a one-element tuple.
        frame_index (torch.Tensor, optional): ``long`` positions of the frames in their
            files; its shape is the batch size. Default: every frame of the single
            source (the file is opened once to count them).
        file_id (torch.Tensor, optional): ``long`` index into ``sources`` per frame,
            shaped like ``frame_index``. Default: zeros (every frame in ``sources[0]``).

    Keyword Args:
        stream (int, optional): the index of the video stream in the container.
            Default: the first video stream.
        auto_decode (bool, optional): when ``True``, ``ref[idx]`` returns the decoded
            frames instead of a narrower reference (interactive use; keep ``False`` for
            references stored in a replay buffer). Default: ``False``.
        out_device (torch.device or str, optional): the device of decoded frames.
            Default: the reference's own device, else CPU.
        out_dtype (torch.dtype, optional): the dtype of decoded frames. Default:
            ``torch.uint8``.

    Examples:
        >>> import os, tempfile
        >>> import av, numpy as np, torch
        >>> from rl.data import VideoClipRef
        >>> path = os.path.join(tempfile.mkdtemp(), "clip.mkv")
        >>> with av.open(path, "w") as container:  # 16 gray frames, frame i of level i
        ...     stream = container.add_stream("ffv1", rate=10)
        ...     stream.width, stream.height, stream.pix_fmt = 8, 6, "bgr0"
        ...     for i in range(16):
        ...         image = np.full((6, 8, 3), i, dtype=np.uint8)
        ...         container.mux(stream.encode(av.VideoFrame.from_ndarray(image)))
        ...     container.mux(stream.encode())
        >>> ref = VideoClipRef(path)
        >>> ref.batch_size
        torch.Size([16])
        >>> clip = ref[4:8]  # still a reference: nothing is decoded
        >>> clip.frame_index
        tensor([4, 5, 6, 7])
        >>> frames = clip.decode()
        >>> frames.shape, frames.dtype
        (torch.Size([4, 3, 6, 8]), torch.uint8)
        >>> frames[:, 0, 0, 0]
        tensor([4, 5, 6, 7], dtype=torch.uint8)
        >>> ref.rebin(4).frame_index  # the middle frame of 4 bins of 4 frames
        tensor([ 2,  6, 10, 14])
    """

    sources: Any
    frame_index: torch.Tensor | None = None
    file_id: torch.Tensor | None = None
    stream: int | None = None
    auto_decode: bool = False
    out_device: Any = None
    out_dtype: Any = None

    def __post_init__(self) -> None:
        if _is_path(self.sources):
            self.sources = (_as_path(self.sources),)
        elif isinstance(self.sources, list) and all(_is_path(s) for s in self.sources):
            self.sources = tuple(_as_path(s) for s in self.sources)
        frame_index = self.frame_index
        if frame_index is None:
            frame_index = torch.arange(len(_get_decoder(_first(self.sources), self.stream)))
        frame_index = torch.as_tensor(frame_index).long()
        if frame_index is not self.frame_index:
            self.frame_index = frame_index
        file_id = self.file_id
        file_id = (
            torch.zeros_like(frame_index) if file_id is None else torch.as_tensor(file_id).long()
        )
        if file_id.shape != frame_index.shape:
            raise ValueError(
                f"file_id has shape {tuple(file_id.shape)}, expected the shape of "
                f"frame_index {tuple(frame_index.shape)}"
            )
        if file_id is not self.file_id:
            self.file_id = file_id
        # a tensorclass does not infer its batch size: the frames are the batch dims
        if self.batch_size == torch.Size([]) and frame_index.ndim >= 1:
            self.batch_size = frame_index.shape

    @property
    def source(self) -> str | list:
        """The video path: ``sources[0]`` for a one-file reference, else one path per frame
        (in batch order, flattened)."""
        groups = _file_lists(self.sources)
        if len(groups) == 1 and len(groups[0]) == 1:
            return groups[0][0]
        return _resolve_paths(self.sources, self.file_id.reshape(-1).tolist())

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike,
        *,
        stream: int | None = None,
        num_frames: int | None = None,
        frame_index: torch.Tensor | None = None,
        num_bins: int | None = None,
        frames_per_bin: int | None = None,
        auto_decode: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> VideoClipRef:
        """A reference to the frames of one file (all of them by default).

        Args:
            path (str or PathLike): the video file.

        Keyword Args:
            stream (int, optional): the video stream index. Default: the first one.
            num_frames (int, optional): the file's frame count, to address
                ``arange(num_frames)`` without opening the file. Default: read from it.
            frame_index (torch.Tensor, optional): the positions to address (no file
                read). Exclusive with ``num_bins``.
            num_bins (int, optional): address ``num_bins`` disjoint bins of the file's
                frames (see :meth:`rebin`).
            frames_per_bin (int, optional): frames per bin; needs ``num_bins``.
                Default: the middle frame of each bin.
            auto_decode (bool, optional): see :class:`VideoClipRef`.
            device (torch.device or str, optional): the ``out_device``.
            dtype (torch.dtype, optional): the ``out_dtype``.

        Returns:
            a reference of batch size ``[num_frames]``, ``frame_index.shape``,
            ``[num_bins]`` or ``[num_bins, frames_per_bin]``.

        Raises:
            ValueError: ``num_bins`` with ``frame_index``, or ``frames_per_bin``
                without ``num_bins``.
        """
        path = _as_path(path)
        if num_bins is not None:
            if frame_index is not None:
                raise ValueError("num_bins and frame_index are mutually exclusive")
            if num_frames is None:
                num_frames = len(_get_decoder(path, stream))
            frame_index = _bin_frame_index(int(num_frames), int(num_bins), frames_per_bin)
        elif frames_per_bin is not None:
            raise ValueError("frames_per_bin needs num_bins")
        elif frame_index is None and num_frames is not None:
            frame_index = torch.arange(int(num_frames))
        return cls(
            sources=(path,),
            frame_index=frame_index,
            stream=stream,
            auto_decode=auto_decode,
            out_device=device,
            out_dtype=dtype,
        )

    @classmethod
    def from_files(
        cls,
        paths: Sequence[str | os.PathLike],
        *,
        num_frames_per_file: int | Sequence[int] | None = None,
        num_bins: int | None = None,
        frames_per_bin: int | None = None,
        stream: int | None = None,
        auto_decode: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> VideoClipRef:
        """One reference over the frames of several files, one after the other.

        Frame ``j`` of the result is a ``(file_id, frame_index)`` pair, so slices,
        :meth:`rebin` and :meth:`decode` cross file boundaries. Each unique path is
        stored once in ``sources`` (first-seen order); a path given twice is addressed
        twice with the same ``file_id``.

        Args:
            paths (sequence of str or PathLike): the files, in order.

        Keyword Args:
            num_frames_per_file (int or sequence of int, optional): the frame count of
                every file (an int) or of each file. Default: read from each file.
            num_bins (int, optional): rebin the concatenated frames (see :meth:`rebin`).
            frames_per_bin (int, optional): frames per bin; needs ``num_bins``.
            stream (int, optional): the video stream index, for every file.
            auto_decode (bool, optional): see :class:`VideoClipRef`.
            device (torch.device or str, optional): the ``out_device``.
            dtype (torch.dtype, optional): the ``out_dtype``.

        Returns:
            a reference of batch size ``[total frames]`` (or the binned shape).

        Raises:
            ValueError: ``paths`` is empty, ``num_frames_per_file`` has not one count
                per path, or ``frames_per_bin`` comes without ``num_bins``.
        """
        paths = [_as_path(path) for path in paths]
        if not paths:
            raise ValueError("from_files needs at least one path, got none")
        if frames_per_bin is not None and num_bins is None:
            raise ValueError("frames_per_bin needs num_bins")
        if num_frames_per_file is None:
            counts = [len(_get_decoder(path, stream)) for path in paths]
        elif isinstance(num_frames_per_file, int):
            counts = [num_frames_per_file] * len(paths)
        else:
            counts = [int(count) for count in num_frames_per_file]
            if len(counts) != len(paths):
                raise ValueError(
                    f"num_frames_per_file has {len(counts)} counts for {len(paths)} paths"
                )
        unique = list(dict.fromkeys(paths))
        file_of = {path: position for position, path in enumerate(unique)}
        frame_index = torch.cat([torch.arange(count) for count in counts])
        file_id = torch.cat(
            [torch.full((count,), file_of[path]) for path, count in zip(paths, counts)]
        )
        ref = cls(
            sources=tuple(unique),
            frame_index=frame_index,
            file_id=file_id,
            stream=stream,
            auto_decode=auto_decode,
            out_device=device,
            out_dtype=dtype,
            batch_size=frame_index.shape,
        )
        return ref if num_bins is None else ref.rebin(int(num_bins), frames_per_bin)

    @classmethod
    def from_timestamps(
        cls,
        path: str | os.PathLike,
        timestamps: torch.Tensor,
        *,
        stream: int | None = None,
        fps: float | None = None,
        auto_decode: bool = False,
        device: Any = None,
        dtype: Any = None,
    ) -> VideoClipRef:
        """A reference to the frames nearest to ``timestamps`` (seconds).

        Frame ``round(t * fps)`` is addressed for each ``t``, clamped to the file's
        frames, so a camera running at its own rate can be aligned with a control loop.

        Args:
            path (str or PathLike): the video file (opened once for its frame count).
            timestamps (torch.Tensor): times in seconds, of any shape (the batch size).

        Keyword Args:
            stream (int, optional): the video stream index.
            fps (float, optional): frames per second. Default: the stream's average
                rate (PyAV's ``average_rate``, else the mean over its frame times).
            auto_decode (bool, optional): see :class:`VideoClipRef`.
            device (torch.device or str, optional): the ``out_device``.
            dtype (torch.dtype, optional): the ``out_dtype``.

        Returns:
            a reference of batch size ``timestamps.shape``.
        """
        path = _as_path(path)
        reader = _get_decoder(path, stream)
        if fps is None:
            fps = reader.average_fps
        times = torch.as_tensor(timestamps, dtype=torch.float64)
        frame_index = (times * float(fps)).round().long().clamp_(0, len(reader) - 1)
        return cls.from_file(
            path,
            stream=stream,
            frame_index=frame_index,
            auto_decode=auto_decode,
            device=device,
            dtype=dtype,
        )

    def rebin(self, num_bins: int, frames_per_bin: int | None = None) -> VideoClipRef:
        """Resamples the addressed frames onto ``num_bins`` consecutive, disjoint bins.

        With ``frames_per_bin=None`` each bin keeps its middle frame (batch size
        ``[num_bins]``); with ``k`` it keeps ``k`` frames from its first to its last,
        repeating frames where a bin is shorter (batch size ``[num_bins, k]``). Bin
        edges are ``round(linspace(0, n, num_bins + 1))`` over the ``n`` frames the
        reference addresses (flattened). The result is lazy, whatever ``auto_decode``.

        Args:
            num_bins (int): the number of bins.
            frames_per_bin (int, optional): frames kept per bin. Default: one.

        Returns:
            a new reference.

        Raises:
            ValueError: ``num_bins`` or ``frames_per_bin`` is below 1, or the reference
                is empty.
        """
        flat = self.reshape(-1)
        positions = _bin_frame_index(int(flat.batch_size.numel()), int(num_bins), frames_per_bin)
        # index the underlying tensordict: ``flat[positions]`` would decode with auto_decode
        return type(self)._from_tensordict(flat._tensordict[positions])

    def decode(self, *, device: Any = None, dtype: Any = None) -> torch.Tensor:
        """Decodes the addressed frames.

        Frames are grouped by file; each distinct frame is decoded once, seeking to the
        keyframe before it and decoding forward (a contiguous run is one such read).

        Keyword Args:
            device (torch.device or str, optional): the output device. Default:
                ``out_device``, else the reference's device, else CPU. Frames are
                decoded on the CPU and then moved.
            dtype (torch.dtype, optional): the output dtype (a plain cast of the uint8
                values). Default: ``out_dtype``, else ``torch.uint8``.

        Returns:
            RGB frames of shape ``[*batch_size, 3, H, W]``.

        Raises:
            ModuleNotFoundError: PyAV is not installed.
            FileNotFoundError: a source file does not exist (the message names it).
            IndexError: a frame index is out of range (the message names it, the file
                and its frame count).
            ValueError: the files' frames differ in size.
        """
        if not _has_av:
            raise ModuleNotFoundError(_AV_MISSING)
        if device is None:
            device = _first(self.out_device)
        if device is None:
            device = self.device
        if dtype is None:
            dtype = _first(self.out_dtype)
        stream = _first(self.stream)
        frame_index = self.frame_index.reshape(-1).tolist()
        paths = _resolve_paths(self.sources, self.file_id.reshape(-1).tolist())
        groups: dict[Any, list[int]] = defaultdict(list)
        for position, path in enumerate(paths):
            groups[path].append(position)
        if not groups:
            shape = _get_decoder(_first(self.sources), stream).frame_shape
            out = torch.empty((0, *shape), dtype=torch.uint8)
        else:
            out = None
            for path, positions in groups.items():
                wanted = sorted({frame_index[position] for position in positions})
                frames = _get_decoder(path, stream).read(wanted)
                if out is None:
                    out = frames.new_empty((len(frame_index), *frames.shape[1:]))
                    first_path = path
                elif frames.shape[1:] != out.shape[1:]:
                    raise ValueError(
                        f"frames of {path!r} have shape {tuple(frames.shape[1:])}, those of "
                        f"{first_path!r} {tuple(out.shape[1:])}: a reference decodes to one "
                        "tensor, so its files must share a frame size"
                    )
                offset = {index: row for row, index in enumerate(wanted)}
                rows = torch.tensor([offset[frame_index[position]] for position in positions])
                out[torch.tensor(positions)] = frames[rows]
        if dtype is not None:
            out = out.to(dtype)
        if device is not None:
            out = out.to(device)
        return out.reshape(*self.batch_size, *out.shape[1:])

    @property
    def frames(self) -> torch.Tensor:
        """The decoded frames (``self.decode()``)."""
        return self.decode()

    def __getitem__(self, index):
        out = super().__getitem__(index)
        if isinstance(out, VideoClipRef) and bool(_first(out.auto_decode, False)):
            return out.decode()
        return out

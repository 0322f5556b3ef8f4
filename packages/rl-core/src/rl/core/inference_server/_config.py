"""The two configuration objects of an inference server: batching and devices."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

__all__ = ["InferenceDeviceConfig", "InferenceServerConfig"]

_SERVICE_BACKENDS = ("thread", "process", "ray")


def _as_device(device: torch.device | str | int | None) -> torch.device | None:
    return None if device is None else torch.device(device)


@dataclass
class InferenceDeviceConfig:
    """Where each part of served collection lives.

    Every field takes a :class:`torch.device`, a string or ``None`` and is stored as a
    ``torch.device`` (or ``None``).

    Args:
        policy_device: the policy's device; batches are moved there before the
            forward pass.
        output_device: where answers are moved before they go back to clients.
        env_device: where environments step; the answers' device when
            ``output_device`` is not given.
        storing_device: where collected transitions are stored (a collector setting;
            a server rejects it).

    Examples:
        >>> from rl.core.inference_server import InferenceDeviceConfig
        >>> cfg = InferenceDeviceConfig(policy_device="cpu", env_device="cpu")
        >>> cfg.server_output_device()
        device(type='cpu')
    """

    policy_device: torch.device | str | None = None
    output_device: torch.device | str | None = None
    env_device: torch.device | str | None = None
    storing_device: torch.device | str | None = None

    def __post_init__(self) -> None:
        self.policy_device = _as_device(self.policy_device)
        self.output_device = _as_device(self.output_device)
        self.env_device = _as_device(self.env_device)
        self.storing_device = _as_device(self.storing_device)

    def server_output_device(self) -> torch.device | None:
        """The device answers are returned on: ``output_device``, else ``env_device``."""
        return self.output_device if self.output_device is not None else self.env_device

    @classmethod
    def resolve(
        cls,
        device_config: InferenceDeviceConfig | None = None,
        *,
        device: torch.device | str | None = None,
        policy_device: torch.device | str | None = None,
        output_device: torch.device | str | None = None,
        allow_storing_device: bool = True,
    ) -> InferenceDeviceConfig:
        """One config from a ``device_config`` or the loose device arguments.

        ``device`` stands for ``policy_device`` when that is not given;
        ``output_device`` falls back to ``env_device``.

        Raises:
            ValueError: ``device_config`` given with a loose device argument, or a
                ``storing_device`` where ``allow_storing_device`` is ``False``.
        """
        if device_config is not None:
            given = [
                name
                for name, value in (
                    ("device", device),
                    ("policy_device", policy_device),
                    ("output_device", output_device),
                )
                if value is not None
            ]
            if given:
                raise ValueError(
                    "device_config is mutually exclusive with the device keyword arguments "
                    f"(got {', '.join(given)})"
                )
        else:
            device_config = cls(policy_device=policy_device, output_device=output_device)
        if not allow_storing_device and device_config.storing_device is not None:
            raise ValueError(
                f"storing_device is a collector-level setting (got {device_config.storing_device}) an "
                "inference server does not use (it uses policy_device and output_device, "
                "with env_device standing for output_device): pass it to the collector"
            )
        policy = device_config.policy_device
        return cls(
            policy_device=policy if policy is not None else _as_device(device),
            output_device=device_config.server_output_device(),
            env_device=device_config.env_device,
            storing_device=device_config.storing_device,
        )


@dataclass
class InferenceServerConfig:
    """How an inference server runs and batches.

    Args:
        service_backend: where the serving loop runs: ``"thread"`` (a thread of this
            process), ``"process"`` (a dedicated process) or ``"ray"`` (a Ray actor);
            the last two need a ``policy_factory``. Defaults to ``"thread"``.
        max_batch_size: at most this many requests per forward pass. Defaults to
            ``64``.
        static_batch_size: pad every batch to exactly this many requests (repeating
            the last one; the padded answers are dropped), so the policy always sees
            one shape (CUDA graphs, compiled policies). Must be at least
            ``max_batch_size``. Defaults to ``None`` (no padding).
        min_batch_size: once a request arrived, keep collecting for up to
            ``timeout`` seconds until this many are there. Defaults to ``1``.
        timeout: seconds to wait for requests before running a partial batch.
            Defaults to ``0.01``.
        collect_stats: keep batch-size and latency statistics (``server.stats()``).
            Defaults to ``True``.
        stats_window_size: how many recent samples the latency percentiles use.
            Defaults to ``1024``.
        max_inflight_per_env: at most this many unanswered requests per environment
            of an :class:`~rl.collectors.AsyncBatchedCollector`. Defaults to ``None``
            (no bound).

    Examples:
        >>> from rl.core.inference_server import InferenceServerConfig
        >>> InferenceServerConfig(max_batch_size=8).timeout
        0.01
    """

    service_backend: Literal["thread", "process", "ray"] = "thread"
    max_batch_size: int = 64
    static_batch_size: int | None = None
    min_batch_size: int = 1
    timeout: float = 0.01
    collect_stats: bool = True
    stats_window_size: int = 1024
    max_inflight_per_env: int | None = None

    def __post_init__(self) -> None:
        if self.service_backend not in _SERVICE_BACKENDS:
            raise ValueError(
                f"service_backend={self.service_backend!r} is not supported; expected one "
                f"of {_SERVICE_BACKENDS}"
            )
        _check_batching(self.max_batch_size, self.min_batch_size, self.static_batch_size)
        if self.max_inflight_per_env is not None and self.max_inflight_per_env < 1:
            raise ValueError(
                f"max_inflight_per_env must be at least 1 or None, got {self.max_inflight_per_env}"
            )


def _check_batching(
    max_batch_size: int, min_batch_size: int, static_batch_size: int | None
) -> None:
    """Raises ``ValueError`` for batch sizes a server cannot honour."""
    if max_batch_size < 1:
        raise ValueError(f"max_batch_size must be at least 1, got {max_batch_size}")
    if min_batch_size < 1 or min_batch_size > max_batch_size:
        raise ValueError(
            f"min_batch_size must be in [1, max_batch_size={max_batch_size}], got {min_batch_size}"
        )
    if static_batch_size is not None and static_batch_size < max_batch_size:
        raise ValueError(
            f"static_batch_size={static_batch_size} is smaller than max_batch_size="
            f"{max_batch_size}: a batch could not be padded to it"
        )

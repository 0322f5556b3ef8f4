"""The Ray owner of an inference server: the policy and its serving loop in a Ray actor."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from tensordict import TensorDictBase

from rl.core.ray_runtime import acquire_runtime, import_ray, release_runtime, wait_started

from ._mailbox import MailboxClient
from ._ray import RayTransport
from ._server import InferenceServer

__all__: list[str] = []

_STARTUP_TIMEOUT_S = 600.0  # Ray's first actor imports torch and rl: minutes on a busy machine


class _RayServerActor:
    """Runs in the Ray actor: builds the policy, serves it through Ray queues."""

    def __init__(
        self, policy_factory: Callable[[], Any], transport_options: dict, server_kwargs: dict
    ):
        self.transport = RayTransport(**transport_options)
        self.server = InferenceServer(policy_factory(), self.transport, **server_kwargs).start()

    def client(self) -> MailboxClient:
        return self.transport.client()

    def health(self) -> dict[str, Any]:
        return {"alive": self.server.is_alive, "policy_version": self.server.policy_version}

    def stats(self, reset: bool) -> dict[str, float | int]:
        return self.server.stats(reset=reset)

    def update_model_weights(
        self, weights: TensorDictBase, mark_weight_update: bool
    ) -> dict[str, bool]:
        self.server.load_policy_weights(weights, mark_weight_update=mark_weight_update)
        return {"accepted": True}

    def shutdown(self) -> None:
        self.server.shutdown()
        self.transport.close()


class _RayInferenceServer:
    """What ``InferenceServer(policy_factory=..., service_backend="ray")`` returns: the
    policy is built and served in a Ray actor, clients talk to it through Ray queues
    (from the driver or any actor).

    The actor serves from construction on (:meth:`start` only checks it);
    :meth:`shutdown` stops it for good. Ray is started when not running (and shut down
    by the last rl object that started it), with ``ray_init_config``.

    Args:
        policy_factory: a zero-argument callable returning the policy (run in the actor).
        transport_options: keyword arguments of the actor's :class:`RayTransport`.
        ray_init_config: ``ray.init`` arguments when Ray is not running.
        remote_config: ``ray.remote`` options of the actor (``num_cpus``, ``num_gpus``).
        server_kwargs: the :class:`InferenceServer` keyword arguments (batching,
            devices, versions).
    """

    def __init__(
        self,
        policy_factory: Callable[[], Any],
        transport_options: dict[str, Any] | None,
        ray_init_config: dict[str, Any] | None,
        remote_config: dict[str, Any] | None,
        server_kwargs: dict[str, Any],
    ):
        ray = import_ray("InferenceServer(service_backend='ray')", "rl-collectors[ray]")
        self._ray = ray
        self._held = acquire_runtime(ray, ray_init_config)
        self._actor: Any = None
        try:
            actor_cls = ray.remote(**dict(remote_config or {}))(_RayServerActor)
            self._actor = actor_cls.remote(
                policy_factory, dict(transport_options or {}), server_kwargs
            )
            wait_started(
                ray,
                [self._actor.health.remote()],
                what="the InferenceServer's Ray actor",
                timeout=_STARTUP_TIMEOUT_S,
            )
        except BaseException:
            self._close_actor()
            raise

    def _close_actor(self) -> None:
        actor, self._actor = self._actor, None
        if actor is not None:
            with contextlib.suppress(Exception):
                self._ray.get(actor.shutdown.remote(), timeout=30)
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)
        held, self._held = self._held, False
        release_runtime(self._ray, held)

    def _call(self, method: str, *args: Any) -> Any:
        if self._actor is None:
            raise RuntimeError("the Ray InferenceServer was shut down")
        return self._ray.get(getattr(self._actor, method).remote(*args))

    @property
    def service_backend(self) -> str:
        """Where the policy runs: ``"ray"``."""
        return "ray"

    @property
    def transport_kind(self) -> str:
        """``"ray"``: Ray queues."""
        return "ray"

    @property
    def is_alive(self) -> bool:
        """Whether the actor answers and its serving loop runs."""
        try:
            return bool(self._call("health")["alive"])
        except Exception:  # noqa: BLE001 - a dead or closed actor is not alive
            return False

    @property
    def policy_version(self) -> int:
        """The actor's policy version."""
        return int(self._call("health")["policy_version"])

    def start(self) -> _RayInferenceServer:
        """Checks that the actor serves (it starts at construction).

        Raises:
            RuntimeError: it was shut down or died.
        """
        if not self.is_alive:
            raise RuntimeError("the Ray InferenceServer is not serving (shut down or dead)")
        return self

    def shutdown(self, timeout: float | None = 5.0) -> None:
        """Stops the actor (idempotent)."""
        self._close_actor()

    def client(self) -> MailboxClient:
        """A new client with its own Ray reply queue (picklable to any actor)."""
        return self._call("client")

    def clients(self, num_clients: int) -> list[MailboxClient]:
        """``num_clients`` new clients."""
        if isinstance(num_clients, bool) or not isinstance(num_clients, int):
            raise TypeError(f"num_clients must be an int, got {num_clients!r}")
        if num_clients < 1:
            raise ValueError(f"num_clients must be at least 1, got {num_clients}")
        return [self.client() for _ in range(num_clients)]

    def stats(self, *, reset: bool = False) -> dict[str, float | int]:
        """The actor's :meth:`InferenceServer.stats`."""
        return self._call("stats", reset)

    def health(self) -> dict[str, Any]:
        """``alive`` and ``policy_version`` of the actor's server."""
        return self._call("health")

    def update_model_weights(
        self, weights: TensorDictBase, *, mark_weight_update: bool = True
    ) -> dict[str, bool]:
        """Copies ``weights`` (``TensorDict.from_module(policy)``) into the actor's
        policy; bumps the version unless ``mark_weight_update=False``."""
        return self._call("update_model_weights", weights, mark_weight_update)

    def __enter__(self) -> _RayInferenceServer:
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.shutdown()

    def __del__(self) -> None:
        if getattr(self, "_actor", None) is not None:
            self._close_actor()

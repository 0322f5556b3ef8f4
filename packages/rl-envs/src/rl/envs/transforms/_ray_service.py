"""RayTransform: a transform whose work runs in a Ray actor that several envs can share.

The local object is a client: it keeps the container (the env it sits in) and forwards
the data and spec hooks to a transform that lives in the actor. With ``actor_name``, the
first client creates the named actor and later ones (other envs, other processes of the
cluster) reuse it, so state such as a dataloader's position is shared.
"""

from __future__ import annotations

import abc
from typing import Any

import torch
from tensordict import is_tensor_collection

from rl.core.ray_runtime import import_ray

from ._base import Transform

__all__ = ["RayTransform"]

_EXTRA = "rl-envs[ray]"

# the hooks a client forwards: data hooks first, spec hooks after
_DATA_HOOKS = ("_call", "forward", "_step", "_reset", "_reset_env_preprocess", "_inv_call", "inv")
_SPEC_HOOKS = (
    "transform_observation_spec",
    "transform_reward_spec",
    "transform_done_spec",
    "transform_action_spec",
    "transform_state_spec",
    "transform_output_spec",
    "transform_input_spec",
    "transform_env_batch_size",
    "transform_env_device",
)


class TransformActor:
    """The class of the Ray actor that holds one transform and runs the hooks sent to it.

    Built with ``ray.remote(...)(TransformActor).remote(transform_cls, args, kwargs)``
    (:meth:`RayTransform.remote_transform` does it): ``transform_cls(*args, **kwargs)``
    is built once, in the actor.
    """

    def __init__(self, transform_cls: type, args: tuple, kwargs: dict[str, Any]) -> None:
        self.transform = transform_cls(*args, **kwargs)

    def describe(self) -> dict[str, Any]:
        """What a client keeps locally: keys, the hooks that do something, the repr."""
        t = self.transform
        return {
            "in_keys": t.in_keys,
            "out_keys": t.out_keys,
            "in_keys_inv": t.in_keys_inv,
            "out_keys_inv": t.out_keys_inv,
            "has_step": t.has_step,
            "has_inverse": t.has_inverse,
            "has_reset_preprocess": t._has_reset_preprocess,
            "repr": repr(t),
        }

    def run(self, hook: str, args: tuple, kwargs: dict[str, Any]) -> tuple[bool, Any]:
        """``(True, result)`` of ``hook``, or ``(False, message)`` when it failed."""
        try:
            return True, getattr(self.transform, hook)(*args, **kwargs)
        except Exception as err:
            return False, f"{type(self.transform).__name__}.{hook} failed: {err!r}"


def _to_cpu(value: Any) -> Any:
    """Tensors and tensordicts travel on the CPU (the actor may have no accelerator)."""
    if isinstance(value, (tuple, list)):
        return type(value)(_to_cpu(v) for v in value)
    if isinstance(value, torch.Tensor) or is_tensor_collection(value):
        return value.cpu()
    return value


class RayTransform(Transform, abc.ABC):
    """A transform whose hooks run in a Ray actor (TorchRL's abstract ``RayTransform``).

    Subclasses implement :meth:`_create_actor`, which returns a Ray actor handle; the
    usual body is ``return self.remote_transform(SomeTransform, **kwargs)``, which builds
    ``SomeTransform(**kwargs)`` in an actor with this client's ``num_cpus``, ``num_gpus``
    and ``actor_name``. The data hooks (``_step``, ``_reset``, ``_reset_env_preprocess``,
    ``inv``, ``forward``...) and the spec hooks are forwarded to that transform; the
    container (the env) stays local. Inputs travel on the CPU; outputs are moved to
    ``device`` when one is given. A hook that fails in the actor raises ``RuntimeError``
    here, naming the actor and the hook.

    With ``actor_name``, an actor of that name that already runs is reused (its
    transform serves every client: state such as a dataloader's position is shared), and
    :meth:`_create_actor` is not called. The actor lives until it is killed
    (``ray.kill(transform.actor)``): clients do not own it.

    Unlike TorchRL, keys and the ``has_step`` / ``has_inverse`` flags are read from the
    actor once, when the client is built (not at each access), and the transform in the
    actor has no parent env: a transform that reads its env (its batch size, its specs)
    in a hook does not fit here.

    Args:
        num_cpus: CPUs reserved for the actor (Ray's default when ``None``).
        num_gpus: GPUs reserved for the actor.
        device: where the hooks' outputs are put here (``None``: left on the CPU).
        actor_name: the actor's name, to share it between clients.
        **kwargs: handed to :meth:`_create_actor` (``in_keys`` / ``out_keys`` too).

    Raises:
        ImportError: Ray is not installed (``pip install "rl-envs[ray]"``).
    """

    def __init__(
        self,
        *,
        num_cpus: int | None = None,
        num_gpus: int | None = None,
        device: torch.device | str | None = None,
        actor_name: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(in_keys=kwargs.get("in_keys"), out_keys=kwargs.get("out_keys"))
        ray = import_ray(type(self).__name__, _EXTRA)
        self._num_cpus = num_cpus
        self._num_gpus = num_gpus
        self._device = None if device is None else torch.device(device)
        self._actor_name = actor_name
        actor = None
        if actor_name is not None:
            try:
                actor = ray.get_actor(actor_name)
            except ValueError:  # no actor of that name yet
                actor = None
        if actor is None:
            actor = self._create_actor(**kwargs)
        self.__dict__["_actor"] = actor
        self._describe(self._fetch("describe"))

    @abc.abstractmethod
    def _create_actor(self, **kwargs: Any) -> Any:
        """Creates the Ray actor (a handle) whose transform does the work."""

    def remote_transform(self, transform_cls: type, *args: Any, **kwargs: Any) -> Any:
        """A :class:`TransformActor` holding ``transform_cls(*args, **kwargs)``, with this
        client's ``num_cpus``, ``num_gpus`` and ``actor_name``."""
        ray = import_ray(type(self).__name__, _EXTRA)
        options: dict[str, Any] = {}
        if self._num_cpus is not None:
            options["num_cpus"] = self._num_cpus
        if self._num_gpus is not None:
            options["num_gpus"] = self._num_gpus
        if self._actor_name is not None:
            options["name"] = self._actor_name
        return ray.remote(**options)(TransformActor).remote(transform_cls, args, kwargs)

    @property
    def actor(self) -> Any:
        """The Ray actor handle (kill it with ``ray.kill`` when no client needs it)."""
        return self.__dict__["_actor"]

    def _what(self) -> str:
        name = f" {self._actor_name!r}" if self._actor_name is not None else ""
        return f"{type(self).__name__}'s actor{name}"

    def _fetch(self, method: str, *args: Any) -> Any:
        ray = import_ray(type(self).__name__, _EXTRA)
        try:
            return ray.get(getattr(self.actor, method).remote(*args))
        except ray.exceptions.RayError as err:
            cause = getattr(err, "cause", None) or err
            raise RuntimeError(f"{self._what()} failed in {method}: {cause!r}") from None

    def _describe(self, info: dict[str, Any]) -> None:
        self.in_keys = info["in_keys"]
        self.out_keys = info["out_keys"]
        self.in_keys_inv = info["in_keys_inv"]
        self.out_keys_inv = info["out_keys_inv"]
        self.__dict__["_flags"] = info

    def _run(self, hook: str, *args: Any) -> Any:
        ok, result = self._fetch("run", hook, _to_cpu(args), {})
        if not ok:
            raise RuntimeError(f"{self._what()}: {result}")
        if self._device is not None and (
            isinstance(result, torch.Tensor) or is_tensor_collection(result)
        ):
            result = result.to(self._device)
        return result

    @property
    def has_step(self) -> bool:
        return self.__dict__["_flags"]["has_step"]

    @property
    def has_inverse(self) -> bool:
        return self.__dict__["_flags"]["has_inverse"]

    @property
    def _has_reset_preprocess(self) -> bool:
        return self.__dict__["_flags"]["has_reset_preprocess"]

    @property
    def device(self) -> torch.device | None:
        """Where the hooks' outputs are put (``None``: the CPU, as they come)."""
        return self._device

    def close(self) -> None:
        """Closes the actor's transform (the actor keeps running)."""
        self._run("close")

    def dump(self, **kwargs: Any) -> None:
        self._fetch("run", "dump", (), kwargs)

    def clone(self) -> RayTransform:
        """A client of the same actor, detached from any container."""
        actor = self.__dict__.pop("_actor")
        try:
            out = super().clone()
        finally:
            self.__dict__["_actor"] = actor
        out.__dict__["_actor"] = actor
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.__dict__['_flags']['repr']})"


def _forward(hook: str):
    def method(self: RayTransform, *args: Any) -> Any:
        return self._run(hook, *args)

    method.__name__ = hook
    method.__doc__ = f"Runs the actor's transform's ``{hook}``."
    return method


for _hook in (*_DATA_HOOKS, *_SPEC_HOOKS):
    setattr(RayTransform, _hook, _forward(_hook))
del _hook

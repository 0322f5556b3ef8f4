"""``ThreadingAsyncEnvPool``: each sub-env of an :class:`AsyncEnvPool` runs in a thread."""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

import torch
from tensordict import TensorDictBase

from rl.core import Composite

from .._env_base import EnvBase
from ._pool import AsyncEnvPool

__all__ = ["ThreadingAsyncEnvPool"]


def _run(env: EnvBase, op: str, tensordict: TensorDictBase | None) -> Any:
    if op == "step":
        return env.step(tensordict)
    if op == "reset":
        return env.reset(tensordict)
    return env.step_and_maybe_reset(tensordict)


class ThreadingAsyncEnvPool(AsyncEnvPool):
    """An :class:`AsyncEnvPool` whose sub-envs run in threads of this process.

    Each operation is a call of the sub-env's ``step`` / ``reset`` /
    ``step_and_maybe_reset`` in a thread pool of ``num_envs`` threads: they overlap
    where the sub-envs release the GIL (simulators in C, torch ops, I/O). Sub-envs may
    differ in their specs (use ``stack="lazy"``). The pool closes the sub-envs it built
    (not those it was given) on :meth:`shutdown`.

    Args: as :class:`AsyncEnvPool` (``backend`` is ``"threading"``).

    Examples:
        >>> import torch
        >>> from rl.envs import PendulumEnv, ThreadingAsyncEnvPool
        >>> env = ThreadingAsyncEnvPool([PendulumEnv, PendulumEnv, PendulumEnv])
        >>> env.async_reset_send(env_index=[0, 2])
        >>> list(env.async_reset_recv(min_get=2)["env_index"])
        [0, 2]
        >>> env.close()
    """

    def _setup(self) -> tuple[list[Composite], torch.device | None]:
        self.envs: list[EnvBase] = []
        self._owned: list[EnvBase] = []
        try:
            for maker, kwargs in zip(self.env_makers, self.create_env_kwargs, strict=True):
                if isinstance(maker, EnvBase):
                    env = maker
                else:
                    env = maker(**kwargs)
                    self._owned.append(env)
                if not isinstance(env, EnvBase):
                    raise TypeError(
                        f"env_makers must build rl.envs.EnvBase instances, got {type(env).__name__}"
                    )
                self.envs.append(env)
        except BaseException:
            for env in self._owned:
                env.close()
            raise
        self._pool = ThreadPoolExecutor(
            max_workers=self.num_envs, thread_name_prefix="AsyncEnvPool"
        )
        self._futures: dict[int, Future] = {}
        devices = {env.device for env in self.envs}
        return [env.specs for env in self.envs], devices.pop() if len(devices) == 1 else None

    def _submit(self, index: int, op: str, tensordict: TensorDictBase | None) -> None:
        if self._pool is None:
            raise RuntimeError(f"{type(self).__name__} is shut down")
        self._futures[index] = self._pool.submit(_run, self.envs[index], op, tensordict)

    def _wait(self, indices: list[int], wait_s: float | None) -> dict[int, Any]:
        futures = {self._futures[i]: i for i in indices}
        done, _ = wait(futures, timeout=wait_s, return_when=FIRST_COMPLETED)
        results = {}
        errors = []
        for future in done:
            index = futures[future]
            del self._futures[index]
            error = future.exception()
            if error is None:
                results[index] = future.result()
            else:
                errors.append((index, error))
        if errors:
            # the results gathered meanwhile stay receivable
            self._ready.update(results)
            index, error = errors[0]
            op = self._inflight[index][0]
            for failed, _ in errors:
                del self._inflight[failed]
            raise RuntimeError(f"{type(self).__name__} env {index} raised during {op}") from error
        return results

    def _seed(self, seed: int | None, static_seed: bool) -> int | None:
        for env in self.envs:
            next_seed = env.set_seed(seed, static_seed)
            if seed is not None:
                seed = next_seed
        return seed

    def shutdown(self) -> None:
        """Waits for the running operations, stops the threads and closes the sub-envs
        the pool built (idempotent)."""
        pool = self.__dict__.get("_pool")
        if pool is None:
            return
        self._pool = None
        pool.shutdown(wait=True, cancel_futures=True)
        self._futures.clear()
        self._inflight.clear()
        self._ready.clear()
        for env in self._owned:
            env.close()

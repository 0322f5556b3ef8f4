"""How a ``RayCollector`` talks to its actors: start-up, batch requests, restarts and
shutdown (the driver's side; the actor's side is :mod:`._ray_worker`)."""

from __future__ import annotations

import time

from tensordict import TensorDictBase

from rl.core.ray_runtime import release_runtime, wait_started

__all__ = ["RayActorRequests"]

_RETRY_S = 0.1
_CLOSE_S = 5.0  # how long shutdown() waits for the actors to close their envs


class RayActorRequests:
    """The actor requests of :class:`~rl.collectors.distributed.RayCollector` (a mixin).

    It reads the state the collector's constructor sets: ``_ray`` (the Ray module),
    ``_actors``, ``_configs``, ``_pending`` (``ObjectRef -> (actor index, frames)``),
    ``_actor_weights``, ``_incarnations``, ``_generations``, ``_restarts``,
    ``_max_restarts``, ``_pids``, ``_frames``, ``_assigned``, ``_close_timeout``,
    ``_held_runtime``, ``startup_timeout`` and ``closed``.
    """

    # ------------------------------------------------------------------ start-up
    def _wait_ready(self, indices: list[int], what: str) -> list[dict]:
        ray = self._ray
        refs = [self._actors[i].ready.remote() for i in indices]
        try:
            infos = wait_started(
                ray, refs, what="the RayCollector actors", timeout=self.startup_timeout
            )
        except ray.exceptions.GetTimeoutError:
            self._fail(
                f"the RayCollector actors did not start within {self.startup_timeout} s; "
                f"they ask for {self._describe_resources()} and the cluster has "
                f"{ray.available_resources()} available (actors still starting count as "
                "using theirs)"
            )
        except ray.exceptions.RayTaskError as err:
            self._fail(
                f"a RayCollector actor failed during {what} (all actors were shut down): {err}"
            )
        except RuntimeError as err:  # an actor or its worker died: the cause and the fix
            self._fail(f"{err}\n(all actors were shut down)")
        for i, info in zip(indices, infos):
            self._pids[i] = info["pid"]
            self._incarnations[i] = info["incarnation"]
        return infos

    def _describe_resources(self) -> str:
        return "; ".join(f"actor {i}: {cfg}" for i, cfg in enumerate(self._configs))

    # ----------------------------------------------------------------- actor requests
    def _submit(self, index: int, frames: int) -> None:
        version, ref = self._actor_weights[index]
        future = self._actors[index].collect.remote(
            frames, version, [ref], self._incarnations[index], self._generations[index]
        )
        self._pending[future] = (index, frames)

    def _next_result(self) -> tuple[int, int, TensorDictBase | None]:
        """The first batch in flight to finish: ``(actor index, frames, batch)``.

        A dead actor is restarted (its batch asked again) where configured; otherwise,
        and when an actor raises, every actor is shut down and a ``RuntimeError`` says
        which actor failed and why. A restarted actor (found by its new incarnation,
        whether it died collecting or idle) collects nothing until it has its next
        generation number, which keeps its trajectory ids apart from its former life's.
        """
        ray = self._ray
        while True:
            ready, _ = ray.wait(list(self._pending), num_returns=1)
            future = ready[0]
            index, frames = self._pending.pop(future)
            try:
                incarnation, pid, collected, batch = ray.get(future)
            except ray.exceptions.ActorUnavailableError:
                # restarting after a crash: ask again (Ray says when it is dead for good)
                time.sleep(_RETRY_S)
                self._submit(index, frames)
                continue
            except ray.exceptions.RayActorError as err:
                if self._can_restart(index):
                    self._restarts[index] += 1
                    self._submit(index, frames)  # the restarted actor loads the weights
                    continue
                self._fail(
                    f"RayCollector actor {index} (pid {self._pids[index]}) died while "
                    f"collecting; all actors were shut down (remote_configs="
                    f"{{'max_restarts': k}} restarts crashed actors). Ray says: {err}"
                )
            except ray.exceptions.RayTaskError as err:
                self._fail(
                    f"RayCollector actor {index} raised while collecting (all actors were "
                    f"shut down):\n{err}"
                )
            if not collected:  # a restarted actor: a new life, its ids start again at 0
                self._incarnations[index] = incarnation
                self._generations[index] += 1
                # Ray counts this restart against max_restarts even if it died idle
                self._restarts[index] = max(self._restarts[index], self._generations[index])
                self._pids[index] = pid
                self._submit(index, frames)
                continue
            return index, frames, batch

    def _can_restart(self, index: int) -> bool:
        limit = self._max_restarts[index]
        return limit == -1 or self._restarts[index] < limit

    def _drain(self) -> None:
        """Waits for the batches in flight and drops them (they are not counted)."""
        ray = self._ray
        refs = list(self._pending)
        self._pending.clear()
        if refs:
            ray.wait(refs, num_returns=len(refs))
        self._assigned = self._frames

    # ----------------------------------------------------------------------- shutdown
    def _fail(self, message: str) -> None:
        self._close()
        raise RuntimeError(message)

    def _close(self) -> None:
        self.closed = True
        self._pending.clear()
        ray = self._ray
        actors, self._actors = self._actors, []
        # the collectors of the actors that started close their envs (a dead actor
        # answers at once, with an error), then every actor is killed, answer or not
        started = [pid is not None for pid in getattr(self, "_pids", [])]
        refs = []
        for actor, up in zip(actors, started):
            if up:
                try:
                    refs.append(actor.shutdown.remote())
                except Exception:
                    pass
        if refs:
            try:
                done, _ = ray.wait(refs, num_returns=len(refs), timeout=self._close_timeout)
                for ref in done:
                    try:
                        ray.get(ref)
                    except Exception:
                        pass
            except Exception:
                pass
        for actor in actors:
            try:
                ray.kill(actor, no_restart=True)
            except Exception:
                pass
        held, self._held_runtime = self._held_runtime, False
        release_runtime(ray, held)

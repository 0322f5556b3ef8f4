"""``Collector(...)`` dispatches to a back-end's collector class, as TorchRL 0.14.1."""

import pytest

from rl.collectors import Collector, MultiAsyncCollector, MultiSyncCollector
from rl.core import service_backend
from rl.envs import PendulumEnv


def test_direct_by_default_and_a_list_of_one_env():
    for env_fn in (PendulumEnv, [PendulumEnv]):
        c = Collector(env_fn, None, frames_per_batch=8, total_frames=8)
        try:
            assert type(c) is Collector
            assert next(iter(c)).batch_size == (8,)
        finally:
            c.shutdown()


@pytest.mark.parametrize(
    ("sync", "cls"), [(True, MultiSyncCollector), (False, MultiAsyncCollector)]
)
def test_num_collectors_selects_process_collectors(sync, cls):
    c = Collector(
        PendulumEnv, None, num_collectors=2, sync=sync, frames_per_batch=8, total_frames=16
    )
    try:
        assert type(c) is cls and c.num_workers == 2
        batches = list(c)
        assert sum(b.numel() for b in batches) == 16
    finally:
        c.shutdown()


def test_service_backend_context_and_explicit_override():
    with service_backend("multiprocessing"):
        c = Collector([PendulumEnv, PendulumEnv], None, frames_per_batch=8, total_frames=8)
        try:
            assert type(c) is MultiAsyncCollector and c.num_workers == 2
        finally:
            c.shutdown()
        d = Collector(PendulumEnv, None, backend="direct", frames_per_batch=8)
        assert type(d) is Collector
        d.shutdown()


def test_backend_options_reach_the_backend_class():
    c = Collector(
        PendulumEnv,
        None,
        backend="process",
        num_collectors=2,
        backend_options={"worker_timeout": 30.0},
        frames_per_batch=8,
        total_frames=8,
    )
    try:
        assert c.worker_timeout == 30.0
    finally:
        c.shutdown()


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"backend": "direct", "num_collectors": 2}, ValueError, "at most one collector"),
        ({"backend": "direct", "sync": True}, ValueError, "sync is only valid"),
        ({"backend": "process", "num_collectors": 0}, ValueError, "positive integer"),
        ({"backend": "process", "num_collectors": True}, TypeError, "positive integer"),
        ({"backend": "process", "backend_options": {"sync": True}}, ValueError, "reserved"),
        ({"backend": "process", "backend_options": {"total_frames": 8}}, ValueError, "duplicate"),
        ({"backend": "process", "sync": "yes"}, TypeError, "sync must be a bool"),
        ({"backend": "rpc"}, NotImplementedError, "RPCCollector"),
        ({"backend": "submitit", "launcher": "mp"}, ValueError, "requires launcher='submitit'"),
        ({"backend": "bogus"}, ValueError, "Unsupported service backend 'bogus'"),
    ],
)
def test_bad_selections_raise(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        Collector(PendulumEnv, None, frames_per_batch=8, total_frames=8, **kwargs)


def test_more_errors():
    with pytest.raises(ValueError, match="exactly one environment constructor"):
        Collector([PendulumEnv, PendulumEnv], None, backend="direct", frames_per_batch=8)
    with pytest.raises(ValueError, match="does not match"):
        Collector([PendulumEnv], None, backend="process", num_collectors=2, frames_per_batch=8)
    with pytest.raises(TypeError, match="at most create_env_fn and policy"):
        Collector(PendulumEnv, None, 3, frames_per_batch=8)
    with service_backend("thread"):
        with pytest.raises(ValueError, match="enclosing rl.core.service_backend context"):
            Collector(PendulumEnv, None, frames_per_batch=8)

    class Mine(Collector):
        pass

    with pytest.raises(TypeError, match="only supported when constructing Collector directly"):
        Mine(PendulumEnv, None, backend="process", frames_per_batch=8)
    mine = Mine(PendulumEnv, None, frames_per_batch=8)
    assert type(mine) is Mine
    mine.shutdown()


def test_multicollector_builds_the_mode_class():
    from rl.collectors import MultiCollector

    for sync, cls in (
        (True, MultiSyncCollector),
        (False, MultiAsyncCollector),
        (None, MultiAsyncCollector),
    ):
        c = MultiCollector([PendulumEnv, PendulumEnv], None, sync=sync, frames_per_batch=8)
        try:
            assert type(c) is cls and isinstance(c, MultiCollector)
        finally:
            c.shutdown()
    with pytest.raises(TypeError, match="takes no sync argument"):
        MultiSyncCollector([PendulumEnv], None, sync=True, frames_per_batch=8)


def test_create_env_fn_is_required_and_env_is_its_alias():
    import inspect

    param = inspect.signature(Collector).parameters["create_env_fn"]
    assert param.default is inspect.Parameter.empty  # as TorchRL
    assert "env" not in inspect.signature(Collector).parameters
    c = Collector(env=PendulumEnv(), frames_per_batch=4, total_frames=4)
    try:
        assert type(c) is Collector and next(iter(c)).batch_size == (4,)
    finally:
        c.shutdown()
    with pytest.raises(TypeError, match="create_env_fn or env=, not both"):
        Collector(PendulumEnv(), env=PendulumEnv(), frames_per_batch=4)
    with pytest.raises(TypeError, match="create_env_fn"):
        Collector(frames_per_batch=4)
    # env= also reaches a multi-collector back-end as its create_env_fn
    c = Collector(env=PendulumEnv, num_collectors=2, sync=True, frames_per_batch=8, total_frames=8)
    try:
        assert type(c) is MultiSyncCollector and c.num_workers == 2
    finally:
        c.shutdown()

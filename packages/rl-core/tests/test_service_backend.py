"""``rl.core.service_backend``: a scoped default back-end, per process."""

import multiprocessing as mp

import pytest

from rl.core import current_service_backend, normalize_service_backend, service_backend


def test_aliases_and_unknown_names():
    assert normalize_service_backend("threading") == "thread"
    assert normalize_service_backend("multiprocessing") == "process"
    assert normalize_service_backend("ray") == "ray"
    with pytest.raises(ValueError, match="Unsupported service backend 'gpu'"):
        normalize_service_backend("gpu")
    with pytest.raises(ValueError, match="Unsupported service backend"):
        with service_backend("gpu"):
            pass


def test_nesting_restores_the_outer_value_even_on_error():
    assert current_service_backend() is None
    with service_backend("process") as outer:
        assert outer == "process"
        with pytest.raises(RuntimeError):
            with service_backend("ray"):
                assert current_service_backend() == "ray"
                raise RuntimeError
        assert current_service_backend() == "process"
    assert current_service_backend() is None


def _child(queue):
    queue.put(current_service_backend())


def test_a_forked_child_does_not_inherit_the_selection():
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    with service_backend("process"):
        proc = ctx.Process(target=_child, args=(queue,))
        proc.start()
        got = queue.get(timeout=30)
        proc.join(30)
    assert got is None and proc.exitcode == 0

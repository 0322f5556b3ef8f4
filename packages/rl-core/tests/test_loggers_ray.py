"""RayLogger on the local Ray instance that conftest.py's shared_ray shares."""

import sys

import pytest

from rl.core.loggers import CSVLogger, Logger, RayLogger, get_logger

ray = pytest.importorskip("ray")

# the logger class and function below run in Ray workers by value (this file is not
# importable there)
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

# a bound that catches a hang, not a speed check: a Ray worker's first start imports torch
pytestmark = pytest.mark.timeout(300)

ACTOR = {"num_cpus": 0}


class ListLogger(Logger):
    """Keeps what it is given in memory (read back through a custom ``log_*`` method)."""

    def _create_experiment(self):
        return None

    def log_scalar(self, name, value, step=None):
        self.scalars = [*getattr(self, "scalars", []), (name, value, step)]

    def log_read(self):
        return getattr(self, "scalars", [])

    def log_fail(self):
        raise ValueError("the logger refused")

    def log_video(self, name, video, step=None, **kwargs):
        raise NotImplementedError

    def log_hparams(self, cfg):
        raise NotImplementedError

    def log_histogram(self, name, data, **kwargs):
        raise NotImplementedError


def _log_from_worker(client, start):
    for step in range(start, start + 2):
        client.log_scalar("reward", float(step), step=step)
    return client.exp_name


NAME = "rl_test_ray_logger"


class TestRayLogger:
    def test_csv_logger_served_by_an_actor(self, shared_ray, tmp_path):
        logger = get_logger(
            "csv",
            tmp_path,
            "exp",
            service_backend="ray",
            service_backend_options={"actor_options": {**ACTOR, "name": NAME}},
        )
        try:
            assert type(logger) is RayLogger and logger.service_backend == "ray"
            assert isinstance(logger, CSVLogger) and isinstance(logger.client(), CSVLogger)
            assert logger.exp_name == "exp" and logger.start() is logger
            logger.log_scalar("loss", 0.5, step=0)
            logger.log_metrics({"loss": 0.25}, step=1)
            # a client pickled into a Ray task logs into the same writer
            log = ray.remote(num_cpus=0)(_log_from_worker)
            assert ray.get(log.remote(logger.client(), 10), timeout=240) == "exp"
            logger.flush(timeout=60)
            written = tmp_path / "exp" / "scalars"
            assert (written / "loss.csv").read_text() == "0,0.5\n1,0.25\n"
            assert (written / "reward.csv").read_text() == "10,10.0\n11,11.0\n"
            # the actor's name is taken while it runs: Ray's error names it
            with pytest.raises(ValueError, match=NAME):
                CSVLogger(
                    "again",
                    log_dir=str(tmp_path),
                    service_backend="ray",
                    ray_actor_options={**ACTOR, "name": NAME},
                    use_ray_service=True,
                )
        finally:
            logger.shutdown(timeout=60)
        assert not logger.is_alive
        with pytest.raises(RuntimeError, match="the RayLogger was shut down"):
            logger.log_scalar("loss", 1.0, step=2)
        with pytest.raises(RuntimeError, match="cannot be started again"):
            logger.start()
        logger.shutdown()  # a second shutdown does nothing

    def test_calls_in_order_and_errors_name_the_method(self, shared_ray):
        served = RayLogger(ListLogger, "list", None, ray_actor_options=ACTOR)
        try:
            client = served.client()
            for step in range(3):
                (served if step % 2 else client).log_scalar("x", step * 1.5, step=step)
            assert client.log_read() == [("x", 0.0, 0), ("x", 1.5, 1), ("x", 3.0, 2)]
            with pytest.raises(
                RuntimeError,
                match=r"ListLogger.log_fail failed in the Ray actor: ValueError\('the logger refused'\)",
            ):
                client.log_fail()
            with pytest.raises(AttributeError, match="only the logger's log_\\* methods"):
                client.flush_all  # noqa: B018
            with pytest.raises(TypeError, match="send logger.client\\(\\) instead"):
                ray.cloudpickle.dumps(served)
        finally:
            served.shutdown(timeout=60)

    def test_startup_failure(self, shared_ray, tmp_path):
        with pytest.raises(
            RuntimeError,
            match=r"RayLogger could not start: CSVLogger\(...\) failed in the Ray actor: .*TypeError",
        ):
            RayLogger(CSVLogger, "exp", log_dir=str(tmp_path), bogus=1, ray_actor_options=ACTOR)

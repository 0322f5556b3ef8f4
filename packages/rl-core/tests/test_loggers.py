"""Loggers: what each one writes, read back with its back-end's own reader."""

from __future__ import annotations

import glob
import importlib.metadata
import json
import pickle
import struct
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import MemoryMappedTensor

from rl.core.loggers import (
    CSVLogger,
    Logger,
    MLFlowLogger,
    TensorboardLogger,
    WandbLogger,
    generate_exp_name,
    get_logger,
)
from rl.core.loggers._video import video_frames


def _video(t=6, h=10, w=12):
    """[T, H, W, 3] uint8 frames whose mean brightness grows with time."""
    base = torch.arange(t, dtype=torch.uint8)[:, None, None, None] * 40
    return base.expand(t, h, w, 3).clone()


def _decode_mp4(path):
    import av

    with av.open(str(path)) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    return np.stack(frames)


class TestVideoLayouts:
    def test_layouts_give_the_same_frames(self):
        thwc = _video()
        tchw = thwc.permute(0, 3, 1, 2)
        ntchw = tchw[None]
        floats = thwc.float() / 255
        for v in (tchw, ntchw, floats, thwc.numpy()):
            np.testing.assert_array_equal(video_frames(v), thwc.numpy())
        gray = thwc[..., :1]
        assert video_frames(gray).shape == (6, 10, 12, 3)

    def test_bad_layout(self):
        with pytest.raises(ValueError, match=r"a video must be .* got shape \(6, 10, 12, 5\)"):
            video_frames(torch.zeros(6, 10, 12, 5))


class TestCSVLogger:
    def test_scalars_one_file_each(self, tmp_path):
        logger = CSVLogger("exp", log_dir=tmp_path)
        for step, value in [(10, 1.0), (20, torch.tensor(2.5))]:
            logger.log_scalar("r_training", value, step=step)
        logger.log_metrics({"loss": 0.25, "group/x": 3}, step=20)
        scalars = tmp_path / "exp" / "scalars"
        assert (scalars / "r_training.csv").read_text() == "10,1.0\n20,2.5\n"
        assert (scalars / "loss.csv").read_text() == "20,0.25\n"
        assert (scalars / "group" / "x.csv").read_text() == "20,3.0\n"
        with pytest.raises(ValueError, match=r"one value, got a tensor of shape \(2,\)"):
            logger.log_scalar("bad", torch.ones(2))

    def test_video_mp4_decodes_back(self, tmp_path):
        logger = CSVLogger("exp", log_dir=tmp_path, video_format="mp4", video_fps=10)
        logger.log_video("eval", _video().permute(0, 3, 1, 2)[None], step=100)
        frames = _decode_mp4(tmp_path / "exp" / "videos" / "eval_100.mp4")
        assert frames.shape == (6, 10, 12, 3)
        brightness = frames.reshape(6, -1).mean(1)
        np.testing.assert_allclose(brightness, np.arange(6) * 40, atol=4)

    def test_video_pt(self, tmp_path):
        logger = CSVLogger("exp", log_dir=tmp_path)  # "pt" is the default, as in TorchRL
        assert logger.video_format == "pt"
        logger.log_video("eval", _video())
        logger.log_video("eval", _video())
        saved = torch.load(tmp_path / "exp" / "videos" / "eval_1.pt", weights_only=True)
        assert torch.equal(saved, _video())
        with pytest.raises(ValueError, match="video_format must be 'pt', 'memmap' or 'mp4'"):
            CSVLogger("exp", log_dir=tmp_path, video_format="gif")

    def test_video_memmap(self, tmp_path):
        logger = CSVLogger("exp", log_dir=tmp_path, video_format="memmap")
        logger.log_video("eval", _video(), step=3)
        path = tmp_path / "exp" / "videos" / "eval_3.memmap"
        saved = MemoryMappedTensor.from_filename(path, dtype=torch.uint8, shape=_video().shape)
        assert torch.equal(saved, _video())
        # TorchRL's [N, T, C, H, W] layout is saved as given
        video = _video().permute(0, 3, 1, 2)[None]
        logger.log_video("nt", video, step=0)
        path = tmp_path / "exp" / "videos" / "nt_0.memmap"
        saved = MemoryMappedTensor.from_filename(path, dtype=torch.uint8, shape=video.shape)
        assert torch.equal(saved, video)

    def test_hparams_and_histogram(self, tmp_path):
        logger = CSVLogger("exp", log_dir=tmp_path)
        logger.log_hparams({"lr": 3e-4, "net": {"depth": 2}})
        assert json.loads((tmp_path / "exp" / "hparams.json").read_text()) == {
            "lr": 3e-4,
            "net": {"depth": 2},
        }
        data = torch.arange(100.0)
        logger.log_histogram("weights", data, step=5, bins=4)
        row = (tmp_path / "exp" / "histograms" / "weights.csv").read_text().strip().split(",")
        assert row == ["5", "0.0", "99.0", "25", "25", "25", "25"]

    def test_resume_truncates_rows_written_after_the_checkpoint(self, tmp_path):
        logger = CSVLogger("exp", log_dir=tmp_path)
        logger.log_scalar("a", 1.0, step=1)
        state = logger.state_dict()
        logger.log_scalar("a", 2.0, step=2)  # written by a run killed after its checkpoint
        logger.log_scalar("b", 2.0, step=2)
        resumed = CSVLogger("exp", log_dir=tmp_path)
        resumed.load_state_dict(state)
        resumed.log_scalar("a", 3.0, step=2)
        scalars = tmp_path / "exp" / "scalars"
        assert (scalars / "a.csv").read_text() == "1,1.0\n2,3.0\n"
        assert (scalars / "b.csv").read_text() == ""

    def test_rows_on_disk_at_once_and_files_reopened_after_close(self, tmp_path):
        logger = CSVLogger("exp", log_dir=tmp_path)
        path = tmp_path / "exp" / "scalars" / "train" / "loss.csv"
        logger.log_scalar("train/loss", 0.5, step=1)
        assert path.read_text() == "1,0.5\n"  # flushed while the file stays open
        logger.log_scalar("train/loss", 0.25, step=2)
        assert path.read_text() == "1,0.5\n2,0.25\n"
        (handle,) = logger._files.values()
        logger.close()
        assert handle.closed
        logger.log_scalar("train/loss", 0.125)  # reopened, appended; step = rows so far
        assert path.read_text() == "1,0.5\n2,0.25\n2,0.125\n"
        logger.close()

    def test_resume_closes_the_open_files_before_truncating(self, tmp_path):
        logger = CSVLogger("exp", log_dir=tmp_path)
        logger.log_scalar("a", 1.0, step=1)
        state = logger.state_dict()
        logger.log_scalar("a", 2.0, step=2)
        (handle,) = logger._files.values()
        logger.load_state_dict(state)  # the same logger, resumed from its own state
        assert handle.closed
        logger.log_scalar("a", 3.0, step=2)
        assert (tmp_path / "exp" / "scalars" / "a.csv").read_text() == "1,1.0\n2,3.0\n"
        logger.close()

    def test_a_pickled_copy_opens_its_own_files(self, tmp_path):
        logger = CSVLogger("exp", log_dir=tmp_path)
        logger.log_scalar("a", 1.0, step=1)
        copy = pickle.loads(pickle.dumps(logger))  # a logger sent to another process
        copy.log_scalar("a", 2.0)  # its row count came along: step 1
        copy.log_scalar("a", 2.0, step=2)
        logger.log_scalar("a", 3.0, step=3)
        assert (tmp_path / "exp" / "scalars" / "a.csv").read_text() == (
            "1,1.0\n1,2.0\n2,2.0\n3,3.0\n"
        )
        logger.close()
        copy.close()


class TestTensorboardLogger:
    def test_read_back_with_event_accumulator(self, tmp_path):
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        logger = TensorboardLogger("exp", log_dir=tmp_path)
        logger.log_scalar("loss", 0.5, step=1)
        logger.log_scalar("loss", torch.tensor(0.25), step=2)
        logger.log_histogram("w", torch.arange(10.0), step=3)
        logger.log_video("eval", _video(), step=4)
        logger.log_hparams({"lr": 0.1, "name": "x"})
        logger.close()
        acc = EventAccumulator(str(tmp_path / "exp"), size_guidance={"images": 0}).Reload()
        assert [(e.step, e.value) for e in acc.Scalars("loss")] == [(1, 0.5), (2, 0.25)]
        hist = acc.Histograms("w")[0]
        assert hist.step == 3 and hist.histogram_value.num == 10
        assert hist.histogram_value.max == 9.0
        image = acc.Images("eval")[0]
        assert image.step == 4 and (image.width, image.height) == (12, 10)
        assert image.encoded_image_string[:6] == b"GIF89a"
        assert "hparams" in json.dumps(acc.Tags()) or acc.Tags()["tensors"] is not None


def _wandb_records(run_dir):
    """The records of a .wandb file (a LevelDB-style log of wandb protobuf records)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(glob.glob(str(run_dir / "*.wandb"))[0]).read_bytes()
    assert data[:4] == b":W&B"
    pos, block, chunks, records = 7, 32768, [], []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        length, kind = struct.unpack("<HB", data[pos + 4 : pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunks.append(data[pos + 7 : pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # FULL, LAST
            record = pb.Record()
            record.ParseFromString(b"".join(chunks))
            records.append(record)
            chunks = []
    return records


def _key(item):
    return item.key or "/".join(item.nested_key)


class TestWandbLogger:
    def test_offline_run_files(self, tmp_path, monkeypatch):
        monkeypatch.setenv("WANDB_SILENT", "true")
        monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
        logger = WandbLogger("exp", offline=True, save_dir=tmp_path, project="rl-test")
        logger.log_scalar("r_training", 1.5, step=10)
        logger.log_scalar("r_training", 2.5, step=20)
        logger.log_histogram("w", torch.arange(10.0), step=20, bins=5)
        logger.log_hparams({"lr": 0.1})
        run_dir = Path(logger.experiment.dir).parent
        state = logger.state_dict()
        logger.close()
        # wandb-core writes the run file from its own process: wait for the last row
        deadline = time.monotonic() + 30
        while True:
            records = _wandb_records(run_dir)
            rows = [r for r in records if r.WhichOneof("record_type") == "history"]
            if len(rows) >= 2 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        history = []
        config = {}
        for record in records:
            kind = record.WhichOneof("record_type")
            if kind == "history":
                history.append({_key(i): json.loads(i.value_json) for i in record.history.item})
            elif kind == "config":
                for item in record.config.update:
                    config[_key(item)] = json.loads(item.value_json)
        rewards = [(h["_step"], h["r_training"]) for h in history if "r_training" in h]
        assert rewards == [(10, 1.5), (20, 2.5)], history
        hist = next(h for h in history if "w/_type" in h)
        assert hist["w/_type"] == "histogram" and hist["w/values"] == [2, 2, 2, 2, 2]
        assert hist["w/bins"] == [0, 1.8, 3.6, 5.4, 7.2, 9] and hist["_step"] == 20
        assert config["lr"] == 0.1
        assert state["id"] == run_dir.name.rsplit("-", 1)[1]
        # log_env_packages=True (default): the runtime and the installed packages
        assert config["env"]["python"]["version"] == sys.version
        assert config["env"]["packages"]["torch"] == importlib.metadata.version("torch")
        assert logger.video_fps == 32

    def test_base_url_and_no_env_packages(self, tmp_path, monkeypatch):
        monkeypatch.setenv("WANDB_SILENT", "true")
        monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
        logger = WandbLogger(
            "exp",
            True,
            tmp_path,
            None,
            "rl-test",
            "http://localhost:8123",
            log_env_packages=False,
        )
        try:
            assert logger.base_url == "http://localhost:8123"
            assert logger.experiment.settings.base_url == "http://localhost:8123"
            assert "env" not in dict(logger.experiment.config)
        finally:
            logger.close()


class TestMLFlowLogger:
    def test_read_back_with_mlflow_client(self, tmp_path):
        from mlflow.tracking import MlflowClient

        logger = MLFlowLogger("exp", tracking_uri=tmp_path / "mlruns", tags={"algo": "sac"})
        logger.log_scalar("loss", 0.5, step=1)
        logger.log_scalar("loss", 0.25, step=2)
        logger.log_hparams({"lr": 0.1, "net": {"depth": 2}})
        logger.log_histogram("w", torch.arange(10.0), step=3, bins=2)
        logger.log_video("eval", _video(), step=4)
        logger.close()
        client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
        run = client.get_run(logger.run_id)
        history = client.get_metric_history(logger.run_id, "loss")
        assert [(m.step, m.value) for m in history] == [(1, 0.5), (2, 0.25)]
        assert run.data.params == {"lr": "0.1", "net.depth": "2"}
        assert run.data.tags["algo"] == "sac" and run.info.status == "FINISHED"
        hist = json.loads(
            Path(client.download_artifacts(logger.run_id, "histograms/w_step_3.json")).read_text()
        )
        assert hist["counts"] == [5, 5]
        video = client.download_artifacts(logger.run_id, "videos/eval_step_4.mp4")
        assert _decode_mp4(video).shape == (6, 10, 12, 3)

    def test_artifact_location(self, tmp_path):
        from mlflow.tracking import MlflowClient

        store = tmp_path / "mlruns"
        logger = MLFlowLogger("exp", store, artifact_location=(tmp_path / "art").as_uri())
        logger.log_histogram("w", torch.arange(4.0), step=1, bins=2)
        logger.close()
        client = MlflowClient(tracking_uri=store.as_uri())
        assert client.get_experiment_by_name("exp").artifact_location == (tmp_path / "art").as_uri()
        run_dir = tmp_path / "art" / logger.run_id / "artifacts" / "histograms"
        assert (run_dir / "w_step_1.json").exists()
        # as TorchRL: a file: tracking URI is also the default artifact location
        uri = (tmp_path / "other").as_uri()
        logger = MLFlowLogger("exp2", uri)
        logger.close()
        assert (
            MlflowClient(tracking_uri=uri).get_experiment_by_name("exp2").artifact_location == uri
        )


class TestFactory:
    def test_get_logger_kinds(self, tmp_path):
        assert isinstance(get_logger("csv", tmp_path, "exp"), CSVLogger)
        tb = get_logger("tensorboard", tmp_path, "exp")
        assert isinstance(tb, TensorboardLogger)
        tb.close()
        assert get_logger(None, tmp_path, "exp") is None
        with pytest.raises(ValueError, match="unknown logger_type 'neptune'; expected one of csv"):
            get_logger("neptune", tmp_path, "exp")

    def test_get_logger_csv_writes_mp4_and_resumes(self, tmp_path):
        logger = get_logger("csv", tmp_path, "exp")
        assert logger.video_format == "mp4"  # TorchRL's factory asks for mp4 videos
        logger.log_scalar("a", 1.0, step=1)
        state = logger.state_dict()
        logger.log_scalar("a", 2.0, step=2)
        resumed = get_logger("csv", tmp_path / "elsewhere", "other", state_dict=state)
        assert resumed.exp_name == "exp" and resumed.experiment == tmp_path / "exp"
        assert (tmp_path / "exp" / "scalars" / "a.csv").read_text() == "1,1.0\n"

    def test_get_logger_mlflow_file_uri(self, tmp_path):
        logger = get_logger("mlflow", tmp_path / "mlruns", "exp")
        assert logger.tracking_uri == (tmp_path / "mlruns").as_uri()
        assert logger.artifact_location == logger.tracking_uri
        logger.close()
        with pytest.raises(NotImplementedError, match="logger_type='mlflow'"):
            get_logger("mlflow", tmp_path, "exp", state_dict={"log_dir": "x", "exp_name": "y"})

    def test_get_logger_service_backends(self, tmp_path):
        with pytest.raises(
            ValueError, match=r"takes actor_options and ray_init_config.*\['retries'\]"
        ):
            get_logger(
                "csv", tmp_path, "exp", use_ray_service=True, service_backend_options={"retries": 1}
            )
        with pytest.raises(ValueError, match=r"takes context / mp_context.*got \['retries'\]"):
            get_logger(
                "csv",
                tmp_path,
                "exp",
                service_backend="process",
                service_backend_options={"retries": 3},
            )
        with pytest.raises(ValueError, match="one of 'context' and 'mp_context', got both"):
            get_logger(
                "csv",
                tmp_path,
                "exp",
                service_backend="process",
                service_backend_options={"context": "fork", "mp_context": "fork"},
            )
        with pytest.raises(ValueError, match="Unsupported service backend 'gpu'"):
            get_logger("csv", tmp_path, "exp", service_backend="gpu")
        with pytest.raises(ValueError, match="the 'direct' back-end takes none"):
            get_logger("csv", tmp_path, "exp", service_backend_options={"context": "spawn"})
        with pytest.raises(ValueError, match="mutually exclusive"):
            get_logger(
                "csv",
                tmp_path,
                "exp",
                service_backend_options={"actor_options": {}},
                ray_actor_options={"num_cpus": 1},
            )
        assert isinstance(get_logger("csv", tmp_path, "exp", service_backend="direct"), CSVLogger)

    @pytest.mark.parametrize(
        "module, flag, cls, extra",
        [
            ("_tensorboard", "_has_tensorboard", TensorboardLogger, "tensorboard"),
            ("_wandb", "_has_wandb", WandbLogger, "wandb"),
            ("_mlflow", "_has_mlflow", MLFlowLogger, "mlflow"),
        ],
    )
    def test_missing_back_end_names_the_extra(
        self, tmp_path, monkeypatch, module, flag, cls, extra
    ):
        import importlib

        monkeypatch.setattr(importlib.import_module(f"rl.core.loggers.{module}"), flag, False)
        kwargs = {"tracking_uri": tmp_path} if cls is MLFlowLogger else {}
        with pytest.raises(ImportError, match=rf'pip install "rl-core\[{extra}\]"'):
            cls("exp", **kwargs)

    def test_generate_exp_name(self):
        a, b = generate_exp_name("SAC", "pendulum"), generate_exp_name("SAC", "pendulum")
        assert a != b and a.startswith("SAC_pendulum_")
        assert len(a.split("_")[2]) == 8

    def test_logger_is_abstract(self):
        with pytest.raises(TypeError, match="abstract"):
            Logger("exp", "dir")

"""rl.core.checkpoint: Checkpoint, its adapters, CheckpointRotation and GlobalRNGState."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import zipfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch

from rl.core import (
    Checkpoint,
    CheckpointAdapter,
    CheckpointError,
    CheckpointOptions,
    CheckpointRotation,
    GlobalRNGState,
    StateDictCheckpointAdapter,
    atomic_save,
    load_checkpoint,
)

FORMATS = ["directory", "archive"]


class TensorStore:
    """A replay-buffer-like object: ``dump(path)`` / ``load(path)`` of its tensors."""

    def __init__(self, data=None):
        self.data = torch.zeros(0, 3) if data is None else data
        self.calls = []

    def dump(self, path, *args, **kwargs):
        self.calls.append(("dump", args, kwargs))
        atomic_save({"data": self.data}, Path(path) / "store.pt")

    def load(self, path, *args, **kwargs):
        self.calls.append(("load", args, kwargs))
        self.data = load_checkpoint(Path(path) / "store.pt")["data"]


class Stateful:
    """An object whose state_dict holds every kind the schema describes."""

    def __init__(self, state=None):
        self.state = state

    def state_dict(self):
        return self.state

    def load_state_dict(self, state):
        self.state = state


class Box:
    def __init__(self, value=0):
        self.value = value


class BoxAdapter(CheckpointAdapter):
    adapter_id = "test.box"

    def save(self, component, path, *, args, kwargs):
        path.mkdir(parents=True, exist_ok=True)
        (path / "box.json").write_text(json.dumps(component.value))

    def load(self, component, path, *, map_location, tensor_load_kwargs, args, kwargs):
        component.value = json.loads((path / "box.json").read_text())


class FailingAdapter(BoxAdapter):
    adapter_id = "test.failing"

    def save(self, component, path, *, args, kwargs):
        super().save(component, path, args=args, kwargs=kwargs)
        raise RuntimeError("interrupted")


class Marker:
    """Unpickling it would create a file: proof that code ran."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def _trained_pair():
    torch.manual_seed(0)
    source = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(source.parameters(), lr=0.03)
    for _ in range(2):
        optimizer.zero_grad()
        source(torch.randn(4, 3)).pow(2).sum().backward()
        optimizer.step()
    target = torch.nn.Linear(3, 2)
    return source, optimizer, target, torch.optim.Adam(target.parameters(), lr=0.5)


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


class TestRoundTrip:
    @pytest.mark.parametrize("format", FORMATS)
    def test_module_and_optimizer(self, tmp_path, format):
        source, optimizer, target, target_optimizer = _trained_pair()
        path = Checkpoint(format=format, policy=source, optimizer=optimizer).save(tmp_path / "ckpt")
        assert path.is_dir() is (format == "directory")
        assert zipfile.is_zipfile(path) is (format == "archive")

        result = Checkpoint(policy=target, optimizer=target_optimizer).load(
            path, map_location="cpu"
        )

        assert result.loaded == {"policy", "optimizer"}
        assert result.missing == set() and result.incompatible == {}
        torch.testing.assert_close(target.weight, source.weight)
        torch.testing.assert_close(target.bias, source.bias)
        assert target_optimizer.param_groups[0]["lr"] == 0.03
        saved, restored = optimizer.state_dict()["state"], target_optimizer.state_dict()["state"]
        assert saved.keys() == restored.keys() == {0, 1}
        for index in saved:
            for key in ("step", "exp_avg", "exp_avg_sq"):
                torch.testing.assert_close(restored[index][key], saved[index][key])
        files = result.manifest["components"]["policy"]["files"]
        assert "state.json" in files and "state/meta.json" in files
        assert not any(name.endswith((".pt", ".pickle")) for name in files)

    @pytest.mark.parametrize(
        ("payload_format", "payload_file"),
        [
            ("directory", "state/meta.json"),
            ("archive", "state.tdz"),
            ("consolidated", "state.tdc"),
            ("torch", "state.pt"),
        ],
    )
    def test_payload_formats(self, tmp_path, payload_format, payload_file):
        state = OrderedDict(
            weight=torch.arange(6.0).reshape(2, 3),
            flags=torch.tensor([True, False]),
            shape=torch.Size([2, 3]),
            nested={"lr": 0.1, "names": ["a", "b"], "pair": (1, None), "empty": torch.zeros(0, 4)},
        )
        if payload_format != "torch":  # torch.load(weights_only=True) refuses these types
            state["counts"] = np.array([1, 2, 3], dtype=np.int16)
            state["extra"] = {
                "dtype": torch.float16,
                "tags": {"x"},
                "raw": b"\x00\x01",
                "z": 1 + 2j,
            }
        adapter = StateDictCheckpointAdapter(payload_format=payload_format)
        path = (
            Checkpoint().register("state", Stateful(state), adapter=adapter).save(tmp_path / "ckpt")
        )
        assert payload_file in Checkpoint.manifest(path)["components"]["state"]["files"]

        target = Stateful()
        Checkpoint(state=target).load(path)

        assert list(target.state) == list(state)
        torch.testing.assert_close(target.state["weight"], state["weight"])
        assert torch.equal(target.state["flags"], state["flags"])
        assert target.state["shape"] == torch.Size([2, 3])
        assert target.state["nested"]["names"] == ["a", "b"]
        assert target.state["nested"]["pair"] == (1, None)
        assert target.state["nested"]["empty"].shape == (0, 4)
        if payload_format != "torch":
            assert type(target.state) is OrderedDict
            np.testing.assert_array_equal(target.state["counts"], state["counts"])
            assert target.state["counts"].dtype == np.int16
            assert target.state["extra"] == {
                "dtype": torch.float16,
                "tags": {"x"},
                "raw": b"\x00\x01",
                "z": 1 + 2j,
            }

    @pytest.mark.parametrize("format", FORMATS)
    def test_dump_load_object_with_options(self, tmp_path, format):
        source = TensorStore(torch.arange(12.0).reshape(4, 3))
        checkpoint = Checkpoint(format=format).register(
            "buffer",
            source,
            options=CheckpointOptions(save_args=("registered",), save_kwargs={"a": 1, "b": 2}),
        )
        checkpoint.save(
            tmp_path / "ckpt",
            component_options={
                "buffer": CheckpointOptions(save_args=("call",), save_kwargs={"b": 3})
            },
        )
        assert source.calls == [("dump", ("call",), {"a": 1, "b": 3})]

        target = TensorStore()
        Checkpoint().register(
            "buffer", target, options=CheckpointOptions(load_kwargs={"c": 4})
        ).load(tmp_path / "ckpt")

        assert target.calls == [("load", (), {"c": 4})]
        torch.testing.assert_close(target.data, source.data)

    @pytest.mark.parametrize("format", FORMATS)
    def test_json_state(self, tmp_path, format):
        config, history = {"lr": 0.1, "layers": [64, 64]}, [1.5, 2.5]
        Checkpoint(
            format=format, config=config, history=history, step=7, score=torch.tensor(0.5)
        ).save(tmp_path / "ckpt", metadata={"run": "a"})
        config_target, history_target = {"stale": True}, [0.0]
        result = Checkpoint(config=config_target, history=history_target, step=0, score=0.0).load(
            tmp_path / "ckpt"
        )

        assert config_target == config and history_target == history
        assert result.values == {"config": config, "history": history, "step": 7, "score": 0.5}
        assert result.manifest["metadata"] == {"run": "a"}
        assert result.manifest["format"] == "torchrl.checkpoint"
        assert result.comparison["version_skew"] is False

    @pytest.mark.parametrize("format", FORMATS)
    def test_global_rng_state(self, tmp_path, format):
        random.seed(1)
        np.random.seed(2)
        torch.manual_seed(3)
        Checkpoint(format=format, rng=GlobalRNGState()).save(tmp_path / "ckpt")
        expected = ([random.random() for _ in range(3)], np.random.rand(3), torch.rand(3))
        random.seed(10)
        np.random.seed(20)
        torch.manual_seed(30)

        Checkpoint(rng=GlobalRNGState()).load(tmp_path / "ckpt")

        assert [random.random() for _ in range(3)] == expected[0]
        np.testing.assert_array_equal(np.random.rand(3), expected[1])
        assert torch.equal(torch.rand(3), expected[2])

    def test_partial_selection(self, tmp_path):
        Checkpoint(save_components={"a"}, a={"x": 1}, b={"y": 2}).save(tmp_path / "ckpt")
        assert set(Checkpoint.manifest(tmp_path / "ckpt")["components"]) == {"a"}
        Checkpoint(a={"x": 1}, b={"y": 2}).save(tmp_path / "all")
        target = {}
        result = Checkpoint(a=target, b={}).load(tmp_path / "all", components=["a"])
        assert result.loaded == {"a"} and result.unrequested == {"b"} and target == {"x": 1}

    def test_scoped_adapter(self, tmp_path):
        Checkpoint().register_adapter(Box, BoxAdapter()).register("box", Box(5)).save(
            tmp_path / "ckpt"
        )
        target = Box()
        Checkpoint().register_adapter(Box, BoxAdapter()).register("box", target).load(
            tmp_path / "ckpt"
        )
        assert target.value == 5


class TestStrictness:
    @pytest.fixture
    def path(self, tmp_path):
        return Checkpoint(policy=torch.nn.Linear(2, 2)).save(tmp_path / "ckpt")

    def test_error(self, path):
        with pytest.raises(CheckpointError, match=r"missing=\['optimizer'\]") as info:
            Checkpoint(policy=torch.nn.Linear(2, 2), optimizer={}).load(path)
        assert info.value.result.missing == {"optimizer"}

    def test_warn(self, path, caplog):
        with caplog.at_level(logging.WARNING, logger="rl.core.checkpoint"):
            result = Checkpoint(policy=torch.nn.Linear(2, 2), optimizer={}).load(
                path, strict="warn"
            )
        assert result.loaded == {"policy"} and result.missing == {"optimizer"}
        assert "Checkpoint restore issues: missing=['optimizer']" in caplog.text

    def test_ignore(self, path, caplog):
        with caplog.at_level(logging.WARNING, logger="rl.core.checkpoint"):
            result = Checkpoint(strict="ignore", policy=torch.nn.Linear(2, 2), optimizer={}).load(
                path
            )
        assert result.loaded == {"policy"} and result.missing == {"optimizer"}
        assert caplog.text == ""

    def test_incompatible_adapter_and_shape(self, path):
        result = Checkpoint(policy={}).load(path, strict="ignore")
        assert result.incompatible == {
            "policy": "manifest adapter is 'torchrl.state_dict', target adapter is 'torchrl.json'"
        }
        with pytest.raises(
            CheckpointError,
            match="(?s)failed to load checkpoint component 'policy'.*size mismatch for weight",
        ):
            Checkpoint(policy=torch.nn.Linear(2, 3)).load(path)
        result = Checkpoint(policy=torch.nn.Linear(2, 3)).load(path, strict="ignore")
        assert "size mismatch" in result.incompatible["policy"] and result.loaded == set()

    def test_warn_on_a_failing_component(self, path, caplog):
        target = torch.nn.Linear(2, 3)
        with caplog.at_level(logging.WARNING, logger="rl.core.checkpoint"):
            result = Checkpoint(policy=target, strict="warn").load(path)
        assert result.loaded == set() and "size mismatch" in result.incompatible["policy"]
        assert "Failed to load checkpoint component 'policy'" in caplog.text


class TestManifest:
    def test_map_location(self, tmp_path):
        path = Checkpoint(state=Stateful({"w": torch.ones(2)})).save(tmp_path / "ckpt")
        for map_location, device in (({"cpu": "meta"}, "meta"), ("meta", "meta"), (None, "cpu")):
            target = Stateful()
            Checkpoint(state=target).load(path, map_location=map_location)
            assert target.state["w"].device.type == device
        with pytest.raises(
            CheckpointError, match="callable map_location is only supported by the 'torch'"
        ):
            Checkpoint(state=Stateful()).load(path, map_location=lambda storage, loc: storage)

    def test_migration_of_an_older_format(self, tmp_path, monkeypatch):
        path = Checkpoint(value={"a": 1}).save(tmp_path / "ckpt")
        manifest = json.loads((path / "manifest.json").read_text())
        manifest["format_version"] = 0
        (path / "manifest.json").write_text(json.dumps(manifest))
        monkeypatch.setattr(Checkpoint, "_format_migrations", {})
        with pytest.raises(CheckpointError, match="no migration to version 1 is registered"):
            Checkpoint.manifest(path)

        def migrate(old):
            return {**old, "format_version": 1, "metadata": {"migrated": True}}

        Checkpoint.register_migration(0, migrate)
        assert Checkpoint.manifest(path)["metadata"] == {"migrated": True}
        Checkpoint.register_migration(0, lambda old: {**old, "format_version": 5})
        with pytest.raises(CheckpointError, match="returned version 5; expected 1"):
            Checkpoint.manifest(path)

    def test_archive_with_windows_separators(self, tmp_path):
        source = torch.nn.Linear(2, 2)
        path = Checkpoint(format="archive", policy=source).save(tmp_path / "ckpt")
        with zipfile.ZipFile(path) as archive:
            members = {name: archive.read(name) for name in archive.namelist()}
        manifest = json.loads(members["manifest.json"])
        record = manifest["components"]["policy"]
        record["path"] = record["path"].replace("/", "\\")
        record["files"] = [name.replace("/", "\\") for name in record["files"]]
        members["manifest.json"] = json.dumps(manifest).encode()
        with zipfile.ZipFile(path, "w") as archive:
            for name, payload in members.items():
                archive.writestr(name, payload)
        target = torch.nn.Linear(2, 2)
        Checkpoint(policy=target).load(path)
        torch.testing.assert_close(target.weight, source.weight)

    def test_version_comparison(self, tmp_path, caplog):
        path = Checkpoint(value={}).save(tmp_path / "ckpt")
        manifest = json.loads((path / "manifest.json").read_text())
        assert set(manifest["versions"]) == {"rl-core", "tensordict", "torch"}
        manifest["versions"]["torch"] = "0.0.1"
        (path / "manifest.json").write_text(json.dumps(manifest))
        with caplog.at_level(logging.WARNING, logger="rl.core.checkpoint"):
            result = Checkpoint(value={}).load(path)
        assert result.loaded == {"value"} and result.comparison["version_skew"] is True
        assert result.comparison["versions"]["torch"] == {
            "checkpoint": "0.0.1",
            "runtime": str(torch.__version__),
            "matches": False,
        }
        assert "version skew detected: torch (checkpoint='0.0.1'" in caplog.text


class TestAtomicity:
    @pytest.mark.parametrize("format", FORMATS)
    def test_failed_save_keeps_previous(self, tmp_path, format):
        path = Checkpoint(format=format, value={"version": 1}).save(tmp_path / "ckpt")
        checkpoint_id = Checkpoint.manifest(path)["checkpoint_id"]
        with pytest.raises(RuntimeError, match="interrupted"):
            Checkpoint(format=format).register("value", Box(2), adapter=FailingAdapter()).save(path)
        assert Checkpoint.manifest(path)["checkpoint_id"] == checkpoint_id
        value = {}
        Checkpoint(value=value).load(path)
        assert value == {"version": 1}
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]

    def test_overwrite_across_formats(self, tmp_path):
        path = Checkpoint(value={"v": 1}).save(tmp_path / "ckpt")
        Checkpoint(format="archive", value={"v": 2}).save(path)
        assert path.is_file()
        Checkpoint(value={"v": 3}).save(path)
        value = {}
        Checkpoint(value=value).load(path)
        assert path.is_dir() and value == {"v": 3}

    def test_crash_between_renames_is_recovered(self, tmp_path):
        path = Checkpoint(value={"version": 1}).save(tmp_path / "ckpt")
        # a writer killed after moving the old checkpoint aside, before moving the new one in
        os.replace(path, tmp_path / f".ckpt.backup-{_dead_pid()}-0123")
        value = {}
        Checkpoint(value=value).load(path)
        assert value == {"version": 1}
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]

    @pytest.mark.parametrize("writer", ["live", "dead"])
    @pytest.mark.parametrize("destination", ["present", "missing"])
    def test_manifest_and_is_checkpoint_change_nothing(self, tmp_path, writer, destination):
        path = Checkpoint(value={"version": 1}).save(tmp_path / "ckpt")
        pid = os.getpid() if writer == "live" else _dead_pid()
        backup = tmp_path / f".ckpt.backup-{pid}-0123"
        if destination == "missing":  # a save killed between its renames
            os.replace(path, backup)
        else:
            Checkpoint(value={"version": 0}).save(backup)

        def listing():
            return sorted(
                (p.relative_to(tmp_path).as_posix(), p.read_bytes() if p.is_file() else None)
                for p in tmp_path.rglob("*")
            )

        before = listing()
        if destination == "missing":
            with pytest.raises(FileNotFoundError, match="does not exist"):
                Checkpoint.manifest(path)
            assert not Checkpoint.is_checkpoint(path)
        else:
            assert Checkpoint.manifest(path)["components"]["value"]["adapter"] == "torchrl.json"
            assert Checkpoint.is_checkpoint(path)
        assert listing() == before
        if destination == "missing" and writer == "dead":  # load puts it back
            value = {}
            Checkpoint(value=value).load(path)
            assert value == {"version": 1}
            assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]

    def test_stale_temporaries_of_dead_writers_are_removed(self, tmp_path):
        stale = tmp_path / f".ckpt.stage-{_dead_pid()}-0123"
        stale.mkdir()
        live = tmp_path / f".ckpt.stage-{os.getpid()}-4567"
        live.mkdir()
        Checkpoint(value=1).save(tmp_path / "ckpt")
        assert not stale.exists() and live.exists()


_KILLED_WRITER = """
import os, signal, sys, time
from rl.core import Checkpoint
from rl.core.checkpoint import _checkpoint

path, where = sys.argv[1], sys.argv[2]


class Slow:
    def dump(self, folder):
        (folder / "half").write_text("partial")
        print("ready", flush=True)
        time.sleep(60)

    def load(self, folder):
        pass


if where == "payload":
    Checkpoint(value={"version": 2}, slow=Slow()).save(path)
else:  # killed between moving the old checkpoint aside and renaming the new one in
    replace = os.replace

    def dying_replace(src, dst):
        replace(src, dst)
        if ".backup-" in str(dst):
            os.kill(os.getpid(), signal.SIGKILL)

    _checkpoint.os.replace = dying_replace
    Checkpoint(value={"version": 2}).save(path)
"""


class TestKilledWriter:
    """A writer killed with SIGKILL mid-save leaves the previous checkpoint loadable."""

    @pytest.mark.parametrize("where", ["payload", "publish"])
    def test_previous_checkpoint_survives(self, tmp_path, where):
        path = Checkpoint(value={"version": 1}).save(tmp_path / "ckpt")
        script = tmp_path / "writer.py"
        script.write_text(_KILLED_WRITER)
        process = subprocess.Popen(
            [sys.executable, str(script), str(path), where], stdout=subprocess.PIPE, text=True
        )
        try:
            if where == "payload":
                assert process.stdout.readline().strip() == "ready"
                process.kill()
            assert process.wait(timeout=60) == -9
        finally:
            process.kill()
            process.wait()
            process.stdout.close()
        leftovers = sorted(
            p.name.split("-")[0] for p in tmp_path.iterdir() if p.name.startswith(".")
        )
        # killed in the payload: the half-written stage; killed between the renames: the
        # previous checkpoint moved aside and the complete new one not yet renamed in
        assert leftovers == (
            [".ckpt.stage"] if where == "payload" else [".ckpt.backup", ".ckpt.stage"]
        )

        value = {}
        Checkpoint(value=value).load(path)
        assert value == {"version": 1}
        Checkpoint(value={"version": 3}).save(path)
        Checkpoint(value=value).load(path)
        assert value == {"version": 3}
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "writer.py"]


class TestRotation:
    @pytest.mark.parametrize("format", FORMATS)
    def test_keeps_last(self, tmp_path, format):
        rotation = CheckpointRotation(tmp_path, keep_last=2)
        paths = [
            rotation.save(Checkpoint(format=format, value={"step": s}), step=s) for s in range(1, 6)
        ]
        assert rotation.checkpoints() == tuple(paths[-2:])
        assert [p.name.removesuffix(".torchrl") for p in paths[-2:]] == [
            "checkpoint-000000000004",
            "checkpoint-000000000005",
        ]
        assert not any(p.exists() for p in paths[:3])
        value = {}
        assert rotation.load_latest(Checkpoint(value=value)).loaded == {"value"}
        assert value == {"step": 5}

    @pytest.mark.parametrize("mode", ["min", "max"])
    def test_keeps_best(self, tmp_path, mode):
        scores = [3.0, 0.5, 9.0, 2.0, 4.0, 1.0]
        rotation = CheckpointRotation(tmp_path, keep_last=2, keep_best=("score", mode))
        for step, score in enumerate(scores):
            rotation.save(Checkpoint(value=step), step=step, metadata={"score": score})
        best = None  # plain loop: the best score, the latest of equal ones
        for step, score in enumerate(scores):
            if best is None or (score <= scores[best] if mode == "min" else score >= scores[best]):
                best = step
        assert rotation.best().name == f"checkpoint-{best:012d}"
        assert [p.name for p in rotation.checkpoints()] == [
            f"checkpoint-{s:012d}" for s in sorted({best, 4, 5})
        ]

    def test_same_step_replaced_across_formats(self, tmp_path):
        rotation = CheckpointRotation(tmp_path, keep_last=3)
        directory = rotation.save(Checkpoint(value={"v": 1}), step=4)
        archive = rotation.save(Checkpoint(format="archive", value={"v": 2}), step=4)
        assert not directory.exists() and rotation.checkpoints() == (archive,)
        value = {}
        rotation.load_latest(Checkpoint(value=value))
        assert value == {"v": 2}

    def test_tombstones_of_dead_writers_are_removed(self, tmp_path):
        rotation = CheckpointRotation(tmp_path, keep_last=1)
        dead = tmp_path / f".checkpoint-000000000001.delete-{_dead_pid()}-0123"
        dead.mkdir()
        live = tmp_path / f".checkpoint-000000000002.delete-{os.getpid()}-0123"
        live.mkdir()
        rotation.save(Checkpoint(value=1), step=3)
        assert not dead.exists() and live.exists()

    def test_failed_save_prunes_nothing(self, tmp_path):
        rotation = CheckpointRotation(tmp_path, keep_last=1)
        original = rotation.save(Checkpoint(value=1), step=1)
        with pytest.raises(RuntimeError, match="interrupted"):
            rotation.save(Checkpoint().register("value", Box(), adapter=FailingAdapter()), step=2)
        assert rotation.checkpoints() == (original,)

    def test_ignores_foreign_entries(self, tmp_path):
        rotation = CheckpointRotation(tmp_path, keep_last=1)
        (tmp_path / "notes.txt").write_text("x")
        (tmp_path / "checkpoint-000000000009").mkdir()
        rotation.save(Checkpoint(value=1), step=1)
        rotation.save(Checkpoint(value=2), step=2)
        assert [p.name for p in rotation.checkpoints()] == ["checkpoint-000000000002"]
        assert (tmp_path / "notes.txt").exists() and (tmp_path / "checkpoint-000000000009").exists()

    @pytest.mark.parametrize(
        ("kwargs", "error", "match"),
        [
            ({"keep_last": 0}, ValueError, "keep_last must be at least 1, got 0"),
            ({"keep_last": True}, TypeError, "keep_last must be an integer, got True"),
            ({"keep_last": 1, "prefix": "a/b"}, ValueError, "without path separators, got 'a/b'"),
            (
                {"keep_last": 1, "keep_best": ("score", "median")},
                ValueError,
                "'min' or 'max', got 'median'",
            ),
            ({"keep_last": 1, "keep_best": "score"}, TypeError, "keep_best must be a"),
        ],
    )
    def test_bad_configuration(self, tmp_path, kwargs, error, match):
        with pytest.raises(error, match=match):
            CheckpointRotation(tmp_path, **kwargs)

    @pytest.mark.parametrize(
        ("metadata", "error", "match"),
        [
            ({}, KeyError, "no keep_best metric 'score'"),
            ({"score": "high"}, TypeError, "must be a number, got 'high'"),
            ({"score": float("nan")}, ValueError, "must be finite, got nan"),
        ],
    )
    def test_bad_metric(self, tmp_path, metadata, error, match):
        rotation = CheckpointRotation(tmp_path / "run", keep_last=1, keep_best=("score", "max"))
        with pytest.raises(error, match=match):
            rotation.save(Checkpoint(value=1), step=1, metadata=metadata)
        assert not rotation.directory.exists()

    def test_bad_step_and_empty(self, tmp_path):
        rotation = CheckpointRotation(tmp_path, keep_last=1)
        with pytest.raises(ValueError, match="step must be non-negative, got -1"):
            rotation.save(Checkpoint(value=1), step=-1)
        with pytest.raises(FileNotFoundError, match="No checkpoints were found"):
            rotation.load_latest(Checkpoint(value={}))


class TestBadInput:
    def test_registration_errors(self):
        checkpoint = Checkpoint(a=1)
        with pytest.raises(KeyError, match="'a' is already registered"):
            checkpoint.register("a", 2)
        with pytest.raises(ValueError, match="cannot contain path separators, got 'x/y'"):
            checkpoint.register("x/y", 2)
        with pytest.raises(TypeError, match="adapter must be a CheckpointAdapter, got str"):
            checkpoint.register("b", 2, adapter="json")
        with pytest.raises(ValueError, match="format must be 'directory' or 'archive', got 'zip'"):
            Checkpoint(format="zip")
        with pytest.raises(
            ValueError, match="strictness must be 'error', 'warn' or 'ignore', got 'loose'"
        ):
            Checkpoint(strict="loose")

    def test_save_errors(self, tmp_path):
        with pytest.raises(ValueError, match="Only local checkpoint paths"):
            Checkpoint(value={}).save("s3://bucket/ckpt")
        with pytest.raises(KeyError, match=r"unregistered checkpoint components: \['b'\]"):
            Checkpoint(a=1).save(tmp_path / "ckpt", components={"b"})
        with pytest.raises(TypeError, match="metadata must be JSON-compatible"):
            Checkpoint(a=1).save(tmp_path / "ckpt", metadata={"f": object()})
        with pytest.raises(
            TypeError, match="no checkpoint adapter fits component 'thing' of type object"
        ):
            Checkpoint(thing=object()).save(tmp_path / "ckpt")
        assert list(tmp_path.iterdir()) == []

    def test_not_a_checkpoint(self, tmp_path):
        (tmp_path / "file").write_bytes(b"not a checkpoint")
        with pytest.raises(
            CheckpointError, match="neither a checkpoint directory nor a checkpoint archive"
        ):
            Checkpoint(a={}).load(tmp_path / "file")
        with pytest.raises(FileNotFoundError, match="does not exist"):
            Checkpoint(a={}).load(tmp_path / "absent")
        assert not Checkpoint.is_checkpoint(tmp_path / "file")

    def test_newer_format_version(self, tmp_path):
        path = Checkpoint(a=1).save(tmp_path / "ckpt")
        manifest = json.loads((path / "manifest.json").read_text())
        manifest["format_version"] = 2
        (path / "manifest.json").write_text(json.dumps(manifest))
        with pytest.raises(CheckpointError, match="unsupported newer checkpoint format version 2"):
            Checkpoint.manifest(path)

    def test_weights_only_false_is_refused(self, tmp_path):
        path = Checkpoint(a=1).save(tmp_path / "ckpt")
        with pytest.raises(ValueError, match="weights_only=False, expected True"):
            Checkpoint(a=0).load(path, tensor_load_kwargs={"weights_only": False})


class TestCraftedFiles:
    """A crafted checkpoint is refused with a CheckpointError; nothing in it runs."""

    def _component(self, path, name="policy"):
        return path / Checkpoint.manifest(path)["components"][name]["path"]

    def test_pickled_object_in_torch_payload(self, tmp_path):
        adapter = StateDictCheckpointAdapter(payload_format="torch")
        path = (
            Checkpoint()
            .register("policy", torch.nn.Linear(2, 2), adapter=adapter)
            .save(tmp_path / "ckpt")
        )
        marker = tmp_path / "code-ran"
        torch.save({"weight": Marker(str(marker))}, self._component(path) / "state.pt")

        with pytest.raises(
            CheckpointError, match="refusing to load .*state.pt.*without unpickling"
        ):
            Checkpoint(policy=torch.nn.Linear(2, 2)).load(path)
        result = Checkpoint(policy=torch.nn.Linear(2, 2)).load(path, strict="ignore")
        assert "refusing to load" in result.incompatible["policy"]
        assert not marker.exists()

    def test_class_named_in_tensordict_meta(self, tmp_path):
        path = Checkpoint(policy=torch.nn.Linear(2, 2)).save(tmp_path / "ckpt")
        meta_path = self._component(path) / "state" / "meta.json"
        meta = json.loads(meta_path.read_text())
        meta["_type"] = "<class 'os.system'>"
        meta_path.write_text(json.dumps(meta))
        with pytest.raises(
            CheckpointError,
            match="describes a \"<class 'os.system'>\", expected a plain TensorDict",
        ):
            Checkpoint(policy=torch.nn.Linear(2, 2)).load(path)

    def test_pickle_file_in_tensordict_payload(self, tmp_path):
        path = Checkpoint(policy=torch.nn.Linear(2, 2)).save(tmp_path / "ckpt")
        (self._component(path) / "state" / "other.pickle").write_bytes(b"\x80\x04.")
        with pytest.raises(CheckpointError, match="holds 'other.pickle'.*refusing to read it"):
            Checkpoint(policy=torch.nn.Linear(2, 2)).load(path)

    def test_unknown_schema_kind(self, tmp_path):
        path = Checkpoint(policy=torch.nn.Linear(2, 2)).save(tmp_path / "ckpt")
        (self._component(path) / "state.json").write_text(
            json.dumps({"kind": "object", "module": "os"})
        )
        with pytest.raises(
            CheckpointError, match="entry of kind 'object', which is not a known kind"
        ):
            Checkpoint(policy=torch.nn.Linear(2, 2)).load(path)

    def test_truncated_tensor_file(self, tmp_path):
        path = Checkpoint(policy=torch.nn.Linear(2, 2)).save(tmp_path / "ckpt")
        memmap = sorted((self._component(path) / "state").glob("*.memmap"))[0]
        memmap.write_bytes(memmap.read_bytes()[:-1])
        with pytest.raises(CheckpointError, match=r"holds \d+ bytes, expected \d+ \(truncated\?\)"):
            Checkpoint(policy=torch.nn.Linear(2, 2)).load(path)

    def test_consolidated_with_bad_range(self, tmp_path):
        adapter = StateDictCheckpointAdapter(payload_format="consolidated")
        path = (
            Checkpoint()
            .register("policy", torch.nn.Linear(2, 2), adapter=adapter)
            .save(tmp_path / "ckpt")
        )
        file = self._component(path) / "state.tdc"
        data = file.read_bytes()
        size = int.from_bytes(data[-8:], "little")
        meta = json.loads(data[-8 - size : -8])
        next(iter(meta["leaves"].values()))[3] = 10**9
        tail = json.dumps(meta).encode()
        file.write_bytes(data[: -8 - size] + tail + len(tail).to_bytes(8, "little"))
        with pytest.raises(CheckpointError, match="spans bytes 0..1000000000"):
            Checkpoint(policy=torch.nn.Linear(2, 2)).load(path)

    def test_tdz_member_larger_than_its_tensor_is_not_inflated(self, tmp_path):
        adapter = StateDictCheckpointAdapter(payload_format="archive")
        path = (
            Checkpoint()
            .register("policy", torch.nn.Linear(2, 2), adapter=adapter)
            .save(tmp_path / "ckpt")
        )
        file = self._component(path) / "state.tdz"
        with zipfile.ZipFile(file) as archive:
            members = {name: archive.read(name) for name in archive.namelist()}
        meta = json.loads(members["meta.json"])
        nbytes = 4 * int(np.prod(meta["tensor_00000000"]["shape"]))  # float32
        # 1 MiB of zeros compresses to about 1 kB
        members["tensor_00000000.memmap"] = bytes(2**20)
        with zipfile.ZipFile(file, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name, payload in members.items():
                archive.writestr(name, payload)
        assert file.stat().st_size < 10_000
        with pytest.raises(
            CheckpointError,
            match=rf"state.tdz:tensor_00000000.memmap declares {2**20} bytes, expected at most "
            rf"{nbytes}; refusing to inflate it",
        ):
            Checkpoint(policy=torch.nn.Linear(2, 2)).load(path)

    def test_archive_larger_than_the_free_disk_is_not_extracted(self, tmp_path, monkeypatch):
        from rl.core.checkpoint import _checkpoint

        path = Checkpoint(
            format="archive",
            archive_compression="deflate",
            store=TensorStore(torch.zeros(2**16, 4)),
        ).save(tmp_path / "ckpt")
        assert path.stat().st_size < 100_000  # 1 MiB of zeros, deflated
        usage = _checkpoint.shutil.disk_usage(tmp_path)
        monkeypatch.setattr(_checkpoint.shutil, "disk_usage", lambda _: usage._replace(free=2**19))
        extracted = []
        real_copy = _checkpoint.shutil.copyfileobj
        monkeypatch.setattr(
            _checkpoint.shutil,
            "copyfileobj",
            lambda *args, **kwargs: extracted.append(args) or real_copy(*args, **kwargs),
        )
        with pytest.raises(
            CheckpointError,
            match=r"ckpt: extracting up to entry 'components/0000-store/.+' needs \d+ bytes, "
            rf"more than the {2**19} free in .+; refusing to inflate it",
        ):
            Checkpoint(store=TensorStore()).load(path)
        assert extracted == []

    def test_archive_manifest_declaring_a_huge_size(self, tmp_path):
        path = Checkpoint(format="archive", value={"a": 1}).save(tmp_path / "ckpt")
        data = bytearray(path.read_bytes())
        # the central directory's record of manifest.json: its uncompressed size (offset 24)
        record = data.index(b"PK\x01\x02")
        while data[record + 46 : record + 46 + len(b"manifest.json")] != b"manifest.json":
            record = data.index(b"PK\x01\x02", record + 4)
        data[record + 24 : record + 28] = (2**31 - 1).to_bytes(4, "little")
        path.write_bytes(bytes(data))
        with pytest.raises(
            CheckpointError,
            match=rf"entry 'manifest.json' declares {2**31 - 1} bytes, expected at most "
            rf"{64 * 2**20}; refusing to inflate it",
        ):
            Checkpoint.manifest(path)
        assert not Checkpoint.is_checkpoint(path)

    def test_archive_path_traversal(self, tmp_path):
        path = Checkpoint(format="archive", value={"a": 1}).save(tmp_path / "ckpt")
        with zipfile.ZipFile(path) as archive:
            members = {name: archive.read(name) for name in archive.namelist()}
        manifest = json.loads(members["manifest.json"])
        manifest["components"]["value"]["path"] = "../../outside"
        members["manifest.json"] = json.dumps(manifest).encode()
        with zipfile.ZipFile(path, "w") as archive:
            for name, payload in members.items():
                archive.writestr(name, payload)
        with pytest.raises(CheckpointError, match="unsafe path '../../outside'"):
            Checkpoint(value={}).load(path)
        assert not Checkpoint.is_checkpoint(path)

import copy
import pickle
import warnings

import pytest
import torch

import rl.core
from rl.core import Bounded, Categorical, Composite, NonTensor, OneHot, StackedComposite, Unbounded

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _composite():
    spec = Composite(
        obs=Bounded(-1.0, 1.0, shape=(4, 3)),
        act=OneHot(3, shape=(4, 3), mask=torch.tensor([True, False, True])),
        text=NonTensor(shape=(4,), example_data="x"),
        shape=(4,),
    )
    spec["next", "done"] = Categorical(2, shape=(4, 1), dtype=torch.bool)
    return spec


@pytest.mark.parametrize("copier", [lambda s: pickle.loads(pickle.dumps(s)), copy.deepcopy])
def test_pickle_and_deepcopy(copier):
    spec = _composite()
    back = copier(spec)
    assert back == spec and back["act"].mask.tolist() == spec["act"].mask.tolist()
    stacked = StackedComposite(
        Composite(a=Unbounded()), Composite(a=Unbounded(), b=Unbounded()), dim=0
    )
    assert copier(stacked) == stacked
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = rl.core.BoundedTensorSpec(0.0, 1.0, shape=(2,))
    assert type(copier(old)) is rl.core.BoundedTensorSpec


def test_meta_device_leaves_metadata_only():
    spec = Unbounded(shape=(2,), device="meta")
    assert spec.zero().device.type == "meta" and spec[0].shape == ()


@pytest.mark.gpu
@cuda
def test_cuda_round_trip():
    spec = _composite().to("cuda")
    assert spec.device.type == "cuda" and spec["act"].mask.device.type == "cuda"
    td = spec.rand((2,))
    assert td.device.type == "cuda" and spec.is_in(td)
    assert spec.to("cpu")["obs"] == _composite()["obs"]
    leaf = Bounded(-1.0, 1.0, shape=(3,), device="cuda")
    assert leaf.project(torch.full((3,), 2.0, device="cuda")).tolist() == [1.0, 1.0, 1.0]
    assert leaf[0].low.device.type == "cuda" and leaf.expand(2, 3).rand().device.type == "cuda"


def test_a_value_on_another_device_is_projected_there():
    """As TorchRL's, a CPU spec projects (and checks) a value on another device: its bounds
    follow the value (``meta`` stands for a GPU here; it refuses CPU operands as CUDA
    does)."""
    spec = Bounded(-1.0, 1.0, shape=(3,))
    out = spec.project(torch.empty(5, 3, device="meta"))
    assert out.device.type == "meta" and out.shape == (5, 3)
    assert spec.low.device.type == "cpu"  # the spec itself stays where it was
    values = torch.tensor([[2.0, -3.0, 0.5]], dtype=torch.float64)
    assert spec.project(values).tolist() == [[1.0, -1.0, 0.5]]
    assert spec.is_in(torch.tensor([0.0, 1.0, -1.0])) and not spec.is_in(torch.full((3,), 2.0))


def test_projecting_a_value_on_another_device_compiles_in_one_graph():
    spec = Bounded(-1.0, 1.0, shape=(3,))
    project = torch.compile(spec.project, backend="eager", fullgraph=True)
    out = project(torch.empty(5, 3, device="meta"))
    assert out.device.type == "meta" and out.shape == (5, 3)
    assert project(torch.full((2, 3), 4.0)).tolist() == [[1.0] * 3] * 2

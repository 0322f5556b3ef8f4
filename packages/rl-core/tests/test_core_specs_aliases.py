import inspect
import warnings

import pytest
import torch

import rl.core
from rl.core import (
    Binary,
    Bounded,
    BoundedContinuous,
    BoundedDiscrete,
    Categorical,
    Composite,
    MultiCategorical,
    MultiOneHot,
    NonTensor,
    OneHot,
    StackedComposite,
    Unbounded,
    UnboundedContinuous,
    UnboundedDiscrete,
)

CASES = [
    ("BoundedTensorSpec", (-1.0, 1.0), {"shape": (2,)}, Bounded(-1.0, 1.0, shape=(2,))),
    ("UnboundedContinuousTensorSpec", ((3,),), {}, Unbounded(shape=(3,))),
    ("UnboundedDiscreteTensorSpec", ((3,),), {}, Unbounded(shape=(3,), dtype=torch.int64)),
    ("OneHotDiscreteTensorSpec", (4,), {}, OneHot(4)),
    ("DiscreteTensorSpec", (4,), {}, Categorical(4)),
    ("MultiOneHotDiscreteTensorSpec", ([2, 3],), {}, MultiOneHot([2, 3])),
    ("MultiDiscreteTensorSpec", ([2, 3],), {}, MultiCategorical([2, 3])),
    ("BinaryDiscreteTensorSpec", (3,), {}, Binary(3)),
    ("NonTensorSpec", (), {"shape": (2,)}, NonTensor(shape=(2,))),
    ("CompositeSpec", (), {"obs": Unbounded(shape=(1,))}, Composite(obs=Unbounded(shape=(1,)))),
]


@pytest.mark.parametrize("name,args,kwargs,expected", CASES, ids=[c[0] for c in CASES])
def test_deprecated_alias_builds_same_spec(name, args, kwargs, expected):
    cls = getattr(rl.core, name)
    with pytest.warns(
        DeprecationWarning, match=rf"{name} is deprecated, use {type(expected).__name__} instead"
    ):
        spec = cls(*args, **kwargs)
    assert isinstance(spec, type(expected))
    assert spec == expected and expected == spec
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # copies do not warn again
        assert spec.clone() == expected
        assert spec.expand(3, *spec.shape).shape == (3, *spec.shape)


def test_lazy_stacked_composite_spec():
    a = Composite(obs=Unbounded(shape=(1,)))
    with pytest.warns(DeprecationWarning, match="LazyStackedCompositeSpec is deprecated"):
        spec = rl.core.LazyStackedCompositeSpec(a, a.clone(), dim=0)
    assert isinstance(spec, StackedComposite) and spec.shape == (2,)


def test_positional_dtype_wins_over_alias_default():
    with pytest.warns(DeprecationWarning):
        spec = rl.core.UnboundedDiscreteTensorSpec((2,), "cpu", torch.int32)
    assert spec.dtype == torch.int32


def test_tutorial_snippet():
    # from the TorchRL tutorial: BoundedTensorSpec(-torch.ones(3), torch.ones(3))
    with pytest.warns(DeprecationWarning):
        spec = rl.core.BoundedTensorSpec(-torch.ones(3), torch.ones(3))
    assert spec.shape == (3,)
    assert spec.project(torch.tensor([5.0, -5.0, 0.1])).tolist() == pytest.approx([1.0, -1.0, 0.1])


def test_dtype_specific_names_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert UnboundedDiscrete(shape=(1,)).dtype == torch.int64
        assert UnboundedContinuous(shape=(1,)) == Unbounded(shape=(1,))
        assert BoundedDiscrete(0, 3, shape=(1,)).dtype == torch.int64
        assert BoundedContinuous(0, 3, shape=(1,)) == Bounded(0, 3, shape=(1,))


def test_alias_signature_is_the_parents_with_its_defaults():
    params = inspect.signature(UnboundedDiscrete).parameters
    assert list(params) == ["shape", "device", "dtype", "domain"]
    assert params["dtype"].default == torch.int64 and params["shape"].default == (1,)
    # TorchRL's BoundedContinuous / UnboundedContinuous: dtype None (inferred), domain pinned
    params = inspect.signature(BoundedContinuous).parameters
    assert list(params) == ["low", "high", "shape", "device", "dtype", "domain"]
    assert params["dtype"].default is None and params["domain"].default == "continuous"
    assert inspect.signature(UnboundedContinuous).parameters["dtype"].default is None


def test_continuous_names_infer_dtype_and_keep_the_continuous_domain():
    assert BoundedContinuous(-1.0, 1.0, shape=(2,)).dtype == torch.float32
    assert UnboundedContinuous(shape=(2,)).dtype == torch.float32
    # as TorchRL: a positional integer dtype keeps the domain the name states
    spec = BoundedContinuous(0, 3, (1,), None, torch.int64)
    assert spec.dtype == torch.int64 and spec.domain == "continuous"
    assert UnboundedContinuous((3,), None, torch.float64).dtype == torch.float64
    assert UnboundedContinuous(shape=(1,), domain="discrete").domain == "discrete"
    with pytest.raises(TypeError, match="unexpected keyword argument 'low'"):
        UnboundedContinuous(low=0.0)

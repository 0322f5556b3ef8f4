"""The Stacked spec: leaf specs whose shapes differ (TorchRL 0.14's ``torchrl.data.Stacked``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl.core import Bounded, Categorical, Composite, Stacked, StackedComposite, Unbounded


def hetero():
    return Stacked(Bounded(0.0, 1.0, shape=(3,)), Bounded(-1.0, 0.0, shape=(4,)), dim=0)


class TestStacked:
    def test_members_of_different_shapes(self):
        spec = hetero()
        assert isinstance(spec, Stacked) and spec.shape == (2, -1) and spec.stack_dim == 0
        assert spec.dtype == torch.float32 and spec.domain == "continuous"
        assert spec[0].shape == (3,) and spec[1].high.tolist() == [0.0] * 4
        assert [s.shape for s in spec.unbind(0)] == [(3,), (4,)]
        # equal shapes still stack into one spec of the members' kind, as before
        same = torch.stack([Bounded(0.0, 1.0, shape=(3,)), Bounded(0.0, 2.0, shape=(3,))])
        assert type(same) is Bounded and same.shape == (2, 3)

    def test_values_are_nested_tensors(self):
        spec = hetero()
        value = spec.rand()
        assert value.is_nested
        first, second = value.unbind(0)
        assert first.shape == (3,) and second.shape == (4,)
        assert bool((first >= 0).all() and (second <= 0).all())
        assert spec.is_in(value) and spec.is_in([torch.zeros(3), torch.zeros(4)])
        assert not spec.is_in([torch.zeros(3), torch.ones(4)])
        with pytest.raises(ValueError, match=r"has a member 1 that has values outside"):
            spec.assert_is_in([torch.zeros(3), torch.ones(4)])
        assert [t.tolist() for t in spec.zero().unbind(0)] == [[0.0] * 3, [0.0] * 4]
        projected = spec.project([torch.full((3,), 5.0), torch.full((4,), 5.0)])
        assert [t.tolist() for t in projected.unbind(0)] == [[1.0] * 3, [0.0] * 4]
        encoded = spec.encode([np.zeros(3), np.zeros(4)])
        assert encoded.is_nested and spec.is_in(encoded)
        assert [a.shape for a in spec.to_numpy(encoded)] == [(3,), (4,)]

    def test_same_shaped_values_stack_densely(self):
        masked = Stacked(
            Categorical(3, mask=torch.tensor([True, False, False])), Categorical(3), dim=0
        )
        assert masked.shape == (2,)
        value = masked.rand((4,))
        assert value.shape == (4, 2) and value[:, 0].tolist() == [0] * 4
        assert masked.is_in(value) and not masked.is_in(torch.tensor([1, 1]))
        dims = Stacked(Unbounded(shape=(2, 3)), Unbounded(shape=(2, 3)), dim=1)
        assert dims.shape == (2, 2, 3) and dims.rand().shape == (2, 2, 3)
        assert dims.is_in(torch.zeros(5, 2, 2, 3))

    def test_shape_operations(self):
        spec = hetero()
        expanded = spec.expand(5, 2, -1)
        assert isinstance(expanded, Stacked) and expanded.shape == (5, 2, -1)
        assert expanded[:, 0].shape == (5, 3)
        with pytest.raises(ValueError, match="only as a nested tensor, stacked along the first"):
            expanded.rand()
        assert spec.unsqueeze(-1).shape == (2, -1, 1)
        assert spec.unsqueeze(-1).squeeze(-1) == spec
        assert spec.clone() == spec and spec.to(torch.float64).dtype == torch.float64
        with pytest.raises(IndexError, match="take an index on their stack dim 0 only"):
            spec[0, 1]
        with pytest.raises(NotImplementedError, match="reshape is not defined for Stacked"):
            spec.reshape(-1)

    def test_torch_stack_builds_a_stacked(self):
        # as TorchRL: leaf specs whose shapes differ stack into a lazy Stacked
        spec = torch.stack([Unbounded(shape=(3,)), Unbounded(shape=(4,))])
        assert isinstance(spec, Stacked) and spec.shape == (2, -1) and spec.stack_dim == 0
        assert spec == Stacked(Unbounded(shape=(3,)), Unbounded(shape=(4,)), dim=0)
        last = torch.stack([Bounded(0.0, 1.0, shape=(2, 3)), Bounded(0.0, 1.0, shape=(2, 4))], 1)
        assert isinstance(last, Stacked) and last.shape == (2, 2, -1) and last.stack_dim == 1
        stacked = StackedComposite(
            Composite(a=Unbounded(shape=(3,))), Composite(a=Unbounded(shape=(4,))), dim=0
        )
        td = stacked.rand()
        assert stacked.is_in(td) and td[1]["a"].shape == (4,)

    def test_errors(self):
        with pytest.raises(ValueError, match=r"different dtype"):
            Stacked(Unbounded(shape=(3,)), Unbounded(shape=(4,), dtype=torch.float64), dim=0)
        with pytest.raises(ValueError, match=r"different kind"):
            Stacked(Unbounded(shape=(3,)), Bounded(0.0, 1.0, shape=(4,)), dim=0)
        with pytest.raises(TypeError, match="use StackedComposite for Composites"):
            Stacked(Composite(), Composite(), dim=0)
        # TorchRL's signature: the stack dim is a required keyword
        with pytest.raises(TypeError, match="required keyword-only argument: 'dim'"):
            Stacked(Unbounded(shape=(3,)), Unbounded(shape=(4,)))
        with pytest.raises(TypeError, match="required keyword-only argument: 'dim'"):
            StackedComposite(Composite(), Composite())
        with pytest.raises(ValueError, match="Stacked members must share kind"):
            torch.stack([Unbounded(shape=(3,)), Bounded(0.0, 1.0, shape=(4,))])

"""consolidate_spec, check_no_exclusive_keys, contains_lazy_spec (TorchRL's torchrl.data
utilities for stacked Composites whose members hold different keys)."""

import pytest
import torch

from rl.core import (
    Bounded,
    Composite,
    OneHot,
    Stacked,
    StackedComposite,
    Unbounded,
    check_no_exclusive_keys,
    consolidate_spec,
    contains_lazy_spec,
)


def agents(batch=()):
    """Three agents sharing an observation, two a lidar, each its own nested entry."""
    shared = Bounded(0.0, 1.0, shape=(*batch, 4, 3))
    lidar = Bounded(0.0, 5.0, shape=(*batch, 20))
    own = [
        Composite(x=Unbounded(shape=(*batch, 3, 1)), shape=(*batch, 3)),
        Composite(y=Bounded(0, 3, shape=(*batch, 3, 1, 2)), shape=(*batch, 3)),
        Composite(y=Unbounded(shape=(*batch, 3, 1, 2, 3)), shape=(*batch, 3)),
    ]
    members = [
        Composite(shared=shared, lidar=lidar, hetero=Unbounded(shape=(*batch, 3)), own0=own[0]),
        Composite(shared=shared, lidar=lidar, hetero=Unbounded(shape=(*batch, 2)), own1=own[1]),
        Composite(shared=shared, hetero=Unbounded(shape=(*batch, 2)), own2=own[2]),
    ]
    for m in members:
        m.shape = batch
    return torch.stack(members, 0)


def all_keys(spec):
    """Every key of every member (nested keys as tuples)."""
    if isinstance(spec, StackedComposite):
        return set().union(*(all_keys(m) for m in spec))
    return {k if isinstance(k, tuple) else (k,) for k in spec.keys(True)}


class TestConsolidateSpec:
    @pytest.mark.parametrize("batch", [(), (2,), (2, 1)])
    def test_every_member_gets_every_key(self, batch):
        spec = agents(batch)
        assert not check_no_exclusive_keys(spec)
        top = consolidate_spec(spec, recurse_through_entries=False)
        assert check_no_exclusive_keys(top, recurse=False)
        full = consolidate_spec(top)
        assert check_no_exclusive_keys(full)
        assert all_keys(full[0]) == all_keys(full[2]) == all_keys(spec)
        # the stand-ins are empty: no value, size 0 past the batch dims
        assert full[2]["lidar"].shape == (*batch, 0)
        assert full[0]["own1"].shape == (*batch, 3)
        assert full[0]["own1", "y"].shape == (*batch, 3, 0, 0)
        assert full[1]["own1", "y"] == spec[1]["own1", "y"]
        assert full.is_in(full.rand())
        # the argument is left as it was
        assert "lidar" not in spec[2].keys() and not check_no_exclusive_keys(spec)

    @pytest.mark.parametrize("batch", [(), (2,)])
    def test_lazy_leaves_and_differing_shapes(self, batch):
        lazy = torch.stack(
            [Unbounded(shape=(*batch, 5, n, 7)) for n in (6, 7, 8, 8)], dim=len(batch)
        )
        assert isinstance(lazy, Stacked)
        shared = Unbounded(shape=(*batch, 5, 5, 5))
        spec = torch.stack(
            [
                Composite(shared=shared, lazy=lazy, shape=batch),
                Composite(shared=shared, shape=batch),
                Composite(shape=batch, device="cpu"),
            ],
            0,
        )
        full = consolidate_spec(spec)
        assert full["shared"].shape == (3, *batch, -1, -1, -1)
        assert full["lazy"].shape == (3, *batch, 4, 5, -1, 7)
        assert check_no_exclusive_keys(full) and contains_lazy_spec(full)

    def test_one_hot_stand_in_keeps_its_encoding_dim(self):
        spec = torch.stack(
            [Composite(a=OneHot(4, shape=(3, 2, 4)), shape=(3,)), Composite(shape=(3,))]
        )
        full = consolidate_spec(spec)
        assert isinstance(full[1]["a"], OneHot) and full[1]["a"].shape == (3, 0, 4)

    def test_kinds_must_agree(self):
        spec = torch.stack(
            [
                Composite(a=Unbounded(shape=(1,)), b=Unbounded(shape=(1,))),
                Composite(a=Unbounded(shape=(1,)), b=Bounded(0, 1, shape=(1,))),
                Composite(a=Unbounded(shape=(1,))),
            ]
        )
        # "b" is held by two members with different kinds: no stand-in fits both
        with pytest.raises(ValueError, match=r"different kinds in the stacked members \(Unbounded"):
            consolidate_spec(spec)

    def test_other_specs_come_back_cloned(self):
        leaf = Unbounded(shape=(2,))
        out = consolidate_spec(leaf)
        assert out == leaf and out is not leaf
        assert check_no_exclusive_keys(leaf)


def test_contains_lazy_spec():
    assert not contains_lazy_spec(Composite(a=Unbounded(shape=(1,)), b=Composite()))
    hetero = torch.stack([Unbounded(shape=(2,)), Unbounded(shape=(3,))])
    assert contains_lazy_spec(hetero)
    assert contains_lazy_spec(Composite(n=Composite(x=hetero, shape=(2,)), shape=(2,)))
    assert contains_lazy_spec(agents())

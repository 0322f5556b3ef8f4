"""Spec factories shared by the rl-core tests."""

import torch

from rl.core import (
    Binary,
    Bounded,
    Categorical,
    MultiCategorical,
    MultiOneHot,
    OneHot,
    Unbounded,
)


def leaf_specs():
    """(id, factory(batch) -> spec) pairs covering every leaf spec kind and dtype family."""
    return [
        ("bounded", lambda b: Bounded(-1.0, 2.0, shape=(*b, 3))),
        (
            "bounded_tensor",
            lambda b: Bounded(torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 5.0]), shape=(*b, 2)),
        ),
        ("bounded_int", lambda b: Bounded(0, 5, shape=(*b, 2), dtype=torch.int64)),
        ("unbounded", lambda b: Unbounded(shape=(*b, 3))),
        ("unbounded_int", lambda b: Unbounded(shape=(*b, 1), dtype=torch.int32)),
        ("categorical", lambda b: Categorical(4, shape=b)),
        ("categorical_bool", lambda b: Categorical(2, shape=(*b, 1), dtype=torch.bool)),
        ("onehot", lambda b: OneHot(5, shape=(*b, 5))),
        ("onehot_long", lambda b: OneHot(3, shape=(*b, 3), dtype=torch.int64)),
        ("binary", lambda b: Binary(4, shape=(*b, 4))),
        ("multionehot", lambda b: MultiOneHot([2, 3], shape=(*b, 5))),
        ("multicategorical", lambda b: MultiCategorical([2, 5, 3], shape=(*b, 3))),
        (
            "multicategorical_2d",
            lambda b: MultiCategorical(torch.tensor([[2, 3], [4, 5]]), shape=(*b, 2, 2)),
        ),
        (
            "categorical_masked",
            lambda b: Categorical(3, shape=b, mask=torch.tensor([True, False, True])),
        ),
        (
            "onehot_masked",
            lambda b: OneHot(3, shape=(*b, 3), mask=torch.tensor([False, True, True])),
        ),
    ]


def pytest_generate_tests(metafunc):
    """Tests taking a ``make_leaf`` argument run once per leaf spec kind."""
    if "make_leaf" in metafunc.fixturenames:
        specs = leaf_specs()
        metafunc.parametrize("make_leaf", [f for _, f in specs], ids=[n for n, _ in specs])

"""Contract shared by every leaf spec, run over each kind (see conftest.leaf_specs)."""

import pytest
import torch


@pytest.mark.parametrize("batch", [(), (2,), (2, 3)])
class TestLeafContract:
    def test_rand_is_in(self, make_leaf, batch):
        spec = make_leaf(batch)
        for _ in range(5):
            x = spec.rand()
            assert x.shape == spec.shape and x.dtype == spec.dtype and x.device == spec.device
            assert spec.is_in(x)
            spec.assert_is_in(x)

    def test_rand_leading_shape(self, make_leaf, batch):
        spec = make_leaf(batch)
        x = spec.rand((4, 2))
        assert x.shape == (4, 2, *spec.shape)
        assert spec.is_in(x)

    def test_zero_one(self, make_leaf, batch):
        spec = make_leaf(batch)
        z, o = spec.zero((3,)), spec.one()
        assert z.shape == (3, *spec.shape) and z.dtype == spec.dtype
        assert not z.any() and o.shape == spec.shape and bool(o.all())

    def test_wrong_shape_or_dtype_not_in(self, make_leaf, batch):
        spec = make_leaf(batch)
        x = spec.rand()
        if spec.ndim:  # a spec of shape () takes any batch of values
            assert not spec.is_in(x[..., :0])
        other = torch.float64 if spec.dtype != torch.float64 else torch.float32
        assert not spec.is_in(x.to(other))
        assert not spec.is_in(x.tolist())

    def test_assert_is_in_message(self, make_leaf, batch):
        spec = make_leaf(batch)
        x = spec.rand().to(torch.float64)
        with pytest.raises(
            ValueError, match=r"has dtype torch.float64, expected .* not in " + type(spec).__name__
        ):
            spec.assert_is_in(x)

    def test_project_of_rand_is_identity(self, make_leaf, batch):
        spec = make_leaf(batch)
        x = spec.rand()
        torch.testing.assert_close(spec.project(x), x)
        # _project is the mapping project applies (TorchRL's hook): the identity on the spec
        torch.testing.assert_close(spec._project(x), x)

    def test_encode_to_numpy_round_trip(self, make_leaf, batch):
        spec = make_leaf(batch)
        x = spec.rand()
        back = spec.encode(spec.to_numpy(x))
        assert back.dtype == spec.dtype and back.device == spec.device
        torch.testing.assert_close(back, x)

    def test_clone_eq(self, make_leaf, batch):
        spec = make_leaf(batch)
        c = spec.clone()
        assert c == spec and c is not spec
        assert spec != make_leaf((*batch, 7))
        assert spec.to("cpu") == spec
        assert spec != spec.to(torch.float16)

    def test_expand(self, make_leaf, batch):
        spec = make_leaf(batch)
        e = spec.expand(5, *spec.shape)
        assert e.shape == (5, *spec.shape)
        assert e.is_in(e.rand()) and e.is_in(spec.rand((5,)))
        assert e[0] == spec
        if spec.ndim and spec.shape[-1] != 1:
            bad = (*spec.shape[:-1], spec.shape[-1] + 1)
            with pytest.raises(ValueError, match=rf"cannot expand .* to \({bad[0]},"):
                spec.expand(bad)

    def test_unsqueeze_squeeze(self, make_leaf, batch):
        spec = make_leaf(batch)
        u = spec.unsqueeze(0)
        assert u.shape == (1, *spec.shape)
        assert u.squeeze(0) == spec
        assert u.squeeze() == spec.squeeze()
        assert u.is_in(u.rand())

    def test_index(self, make_leaf, batch):
        spec = make_leaf((4, *batch))
        assert spec[0] == make_leaf(batch)
        assert spec[1:3].shape == (2, *spec.shape[1:])
        assert spec[torch.tensor([0, 2, 3])].shape == (3, *spec.shape[1:])
        assert spec[..., 0].shape[-1:] == spec.shape[-1:] or spec._nfeat == 0

    def test_index_backward_slice(self, make_leaf, batch):
        # as TorchRL (and numpy): a negative step walks the dim backwards
        spec = make_leaf((5, *batch))
        assert spec[10:1:-1].shape == (3, *spec.shape[1:])
        assert spec[::-2] == torch.stack([spec[4], spec[2], spec[0]], 0)
        with pytest.raises(IndexError, match="negative step cannot be combined with index lists"):
            spec[[0, 1], ::-1]

    def test_repr(self, make_leaf, batch):
        spec = make_leaf(batch)
        text = repr(spec)
        assert text.startswith(type(spec).__name__ + "(") and str(spec.dtype) in text

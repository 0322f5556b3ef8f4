"""DreamerV3 networks, RSSM and policies."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl.core import ExplorationType, set_exploration_type
from rl.modules import (
    DreamerV3BlockGRU,
    DreamerV3BlockGRUCell,
    DreamerV3DiscreteActor,
    DreamerV3ImageDecoder,
    DreamerV3ImageEncoder,
    DreamerV3MLP,
    DreamerV3SeededPolicy,
    RSSMPosteriorV3,
    RSSMPriorV3,
    RSSMRolloutV3,
    RSSMStateEstimatorV3,
)


def _block_diagonal_reference(cell: DreamerV3BlockGRUCell, x, h):
    """The cell's maths with dense block-diagonal matrices and a plain RMS norm."""

    def rms(v, w, eps=1e-4):
        return v * torch.rsqrt(v.square().mean(-1, keepdim=True) + eps) * w

    def block(layer, v):
        return v @ torch.block_diag(*layer.weight) + layer.bias

    silu = torch.nn.functional.silu
    px = silu(rms(cell.input_linear(x), cell.input_norm.weight))
    ph = silu(rms(cell.hidden_linear(h), cell.hidden_norm.weight))
    features = torch.cat([px, ph], -1)
    nb, g = cell.num_blocks, cell.hidden_size // cell.num_blocks
    parts = [torch.cat([h[:, i * g : (i + 1) * g], features], -1) for i in range(nb)]
    z = torch.cat(parts, -1)
    for linear, norm in zip(cell.dynamic_linears, cell.dynamic_norms):
        z = silu(rms(block(linear, z), norm.weight))
    gates = block(cell.gates, z).reshape(-1, nb, 3, g)
    reset, cand, update = (gates[:, :, i].reshape(-1, nb * g) for i in range(3))
    cand = torch.tanh(torch.sigmoid(reset) * cand)
    update = torch.sigmoid(update - 1)
    return update * cand + (1 - update) * h


class TestDreamerV3Nets:
    def test_mlp(self):
        mlp = DreamerV3MLP(6, 4, depth=2, num_cells=8, outscale=0.0)
        out = mlp(torch.randn(3, 2), torch.randn(3, 4))
        torch.testing.assert_close(out, torch.zeros(3, 4))
        assert DreamerV3MLP(6, None, depth=1, num_cells=5)(torch.randn(2, 6)).shape == (2, 5)
        with pytest.raises(
            ValueError, match=r"expects 6 input features, got 5 .*\(3, 2\), \(3, 3\)"
        ):
            mlp(torch.randn(3, 2), torch.randn(3, 3))

    def test_block_gru_cell_matches_block_diagonal_dense(self):
        torch.manual_seed(0)
        cell = DreamerV3BlockGRUCell(5, 8, projection_size=6, num_blocks=2, num_layers=2)
        x, h = torch.randn(4, 5), torch.randn(4, 8)
        torch.testing.assert_close(cell(x, h), _block_diagonal_reference(cell, x, h))
        with pytest.raises(ValueError, match=r"hidden has shape \(4, 7\), expected \(4, 8\)"):
            cell(x, torch.randn(4, 7))
        with pytest.raises(ValueError, match="divisible by num_blocks"):
            DreamerV3BlockGRUCell(5, 9, num_blocks=2)

    def test_block_gru_sequence_is_cell_loop_with_resets(self):
        torch.manual_seed(0)
        gru = DreamerV3BlockGRU(3, 4, projection_size=4, num_blocks=2)
        x = torch.randn(2, 5, 3)
        is_init = torch.zeros(2, 5, 1, dtype=torch.bool)
        is_init[0, 2] = True
        h0 = torch.randn(2, 4)
        out, last = gru(x, h0, is_init)
        h, expected = h0, []
        for t in range(5):
            h = torch.where(is_init[:, t], 0, h)
            h = gru.cell(x[:, t], h)
            expected.append(h)
        torch.testing.assert_close(out, torch.stack(expected, 1))
        torch.testing.assert_close(last, h)
        with pytest.raises(ValueError, match=r"is_init must be boolean with shape \(2, 5\)"):
            gru(x, h0, is_init.float())
        with pytest.raises(NotImplementedError, match="scan"):
            DreamerV3BlockGRU(3, 4, recurrent_backend="scan")

    def test_image_codec(self):
        encoder = DreamerV3ImageEncoder(depth=4, mults=(1, 2))
        image = torch.randint(0, 256, (2, 3, 3, 16, 16), dtype=torch.uint8)
        features = encoder(image)
        assert features.shape == (2, 3, encoder.output_features((3, 16, 16))) == (2, 3, 128)
        torch.testing.assert_close(features, encoder(image.float() / 255))
        decoder = DreamerV3ImageDecoder(
            12, image_shape=(3, 16, 16), depth=4, mults=(1, 2), num_blocks=2
        )
        assert decoder(torch.randn(2, 3, 8), torch.randn(2, 3, 4)).shape == (2, 3, 3, 16, 16)
        with pytest.raises(ValueError, match="divisible by 2 \\*\\* len\\(mults\\) = 4"):
            DreamerV3ImageDecoder(12, image_shape=(3, 10, 16), mults=(1, 2))
        with pytest.raises(ValueError, match=r"expected \[\*batch, 3, H, W\]"):
            encoder(torch.zeros(2, 1, 16, 16))


def _prior(**kwargs):
    return RSSMPriorV3(
        action_shape=(2,),
        hidden_dim=8,
        rnn_hidden_dim=8,
        num_categoricals=2,
        num_classes=4,
        action_dim=2,
        **kwargs,
    )


class TestRSSMV3:
    def test_block_gru_prior_matches_torchrl_fixture(self):
        # parameters set to a linspace and the outputs TorchRL 0.14.1 gives for them
        prior = RSSMPriorV3(
            action_shape=(2,),
            hidden_dim=4,
            rnn_hidden_dim=4,
            num_categoricals=2,
            num_classes=2,
            action_dim=2,
            recurrent_model="block_gru",
            num_blocks=2,
            num_layers=1,
            prior_num_layers=1,
        )
        with torch.no_grad():
            for p in prior.parameters():
                p.copy_(torch.linspace(-0.2, 0.2, p.numel()).reshape_as(p))
        logits, state, belief = prior(
            torch.tensor([[1.0, 0.0, 0.0, 1.0]]),
            torch.tensor([[0.1, -0.2, 0.3, -0.4]]),
            torch.tensor([[2.0, -4.0]]),
        )
        torch.testing.assert_close(
            logits,
            torch.tensor([[[-0.2538432, -0.0850009], [0.0838414, 0.2526837]]]),
            atol=5e-5,
            rtol=5e-5,
        )
        torch.testing.assert_close(
            belief,
            torch.tensor([[0.0575409, -0.1607322, 0.2253285, -0.2480658]]),
            atol=5e-5,
            rtol=5e-5,
        )
        assert state.shape == (1, 4)

    def test_straight_through_sample(self):
        torch.manual_seed(0)
        posterior = RSSMPosteriorV3(
            hidden_dim=8,
            num_categoricals=2,
            num_classes=4,
            rnn_hidden_dim=8,
            obs_embed_dim=3,
            unimix=0.1,
        )
        belief = torch.randn(1, 8).expand(20000, 8)
        logits, state = posterior(belief, torch.randn(1, 3).expand(20000, 3))
        grid = state.reshape(20000, 2, 4)
        assert torch.equal(grid.sum(-1), torch.ones(20000, 2))
        probs = 0.9 * torch.softmax(logits[0], -1) + 0.1 / 4
        torch.testing.assert_close(grid.mean(0), probs, atol=0.015, rtol=0)
        # the gradient is the one of the (mixed) probabilities
        logits = torch.randn(3, 2, 4, requires_grad=True)
        weights = torch.randn(3, 8)
        from rl.modules.models._rssm_v3 import _straight_through_sample

        (_straight_through_sample(logits, 0.1) * weights).sum().backward()
        ref = logits.detach().clone().requires_grad_(True)
        ((0.9 * torch.softmax(ref, -1) + 0.025).flatten(-2) * weights).sum().backward()
        torch.testing.assert_close(logits.grad, ref.grad)

    def test_straight_through_sample_frequencies_and_impossible_classes(self):
        from rl.modules.models._rssm_v3 import _straight_through_sample

        torch.manual_seed(0)
        probs = torch.tensor([[0.5, 0.25, 0.0, 0.25], [0.0, 0.0, 0.9, 0.1]])
        logits = probs.log().expand(3, 20000, 2, 4)  # batch dims [3, 20000], 2 categoricals
        sample = _straight_through_sample(logits, 0.0).reshape(3, 20000, 2, 4)
        assert torch.equal(sample.sum(-1), torch.ones(3, 20000, 2))
        assert (sample[..., 0, 2] == 0).all() and (sample[..., 1, :2] == 0).all()
        torch.testing.assert_close(sample.mean((0, 1)), probs, atol=0.01, rtol=0)

    def test_wrong_latent_sizes_name_them(self):
        prior = _prior()
        with pytest.raises(ValueError, match=r"state has shape \(3, 7\), expected a last dim of 8"):
            prior(torch.zeros(3, 7), torch.zeros(3, 8), torch.zeros(3, 2))
        with pytest.raises(ValueError, match=r"belief has shape \(3, 5\).*rnn_hidden_dim"):
            prior(torch.zeros(3, 8), torch.zeros(3, 5), torch.zeros(3, 2))
        with pytest.raises(ValueError, match=r"action has shape \(3, 3\).*action_dim"):
            prior(torch.zeros(3, 8), torch.zeros(3, 8), torch.zeros(3, 3))
        posterior = RSSMPosteriorV3(
            hidden_dim=8, num_categoricals=2, num_classes=4, rnn_hidden_dim=8, obs_embed_dim=3
        )
        with pytest.raises(ValueError, match=r"obs_embedding has shape \(3, 4\)"):
            posterior(torch.zeros(3, 8), torch.zeros(3, 4))
        with pytest.raises(ValueError, match="block_gru requires an explicit action_dim"):
            RSSMPriorV3(recurrent_model="block_gru")

    @pytest.mark.parametrize("recurrent_model", ["gru", "block_gru"])
    def test_rollout_matches_loop_and_masks_resets(self, recurrent_model):
        torch.manual_seed(0)
        prior_net = _prior(recurrent_model=recurrent_model, num_blocks=2)
        posterior_net = RSSMPosteriorV3(
            hidden_dim=8, num_categoricals=2, num_classes=4, rnn_hidden_dim=8, obs_embed_dim=3
        )
        rollout = RSSMRolloutV3(
            TensorDictModule(
                prior_net,
                in_keys=["state", "belief", "action"],
                out_keys=[("next", "prior_logits"), ("next", "state"), ("next", "belief")],
            ),
            TensorDictModule(
                posterior_net,
                in_keys=[("next", "belief"), ("next", "encoded_latents")],
                out_keys=[("next", "posterior_logits"), ("next", "state")],
            ),
        )
        B, T = 2, 4
        is_init = torch.zeros(B, T, 1, dtype=torch.bool)
        is_init[1, 2] = True
        td = TensorDict(
            state=torch.randn(B, T, 8),
            belief=torch.randn(B, T, 8),
            action=torch.randn(B, T, 2),
            is_init=is_init,
            next=TensorDict(encoded_latents=torch.randn(B, T, 3), batch_size=[B, T]),
            batch_size=[B, T],
        )
        torch.manual_seed(1)
        out = rollout(td)
        torch.manual_seed(1)
        state, belief = td["state"][:, 0], td["belief"][:, 0]
        for t in range(T):
            reset = is_init[:, t]
            state, belief = torch.where(reset, 0, state), torch.where(reset, 0, belief)
            action = torch.where(reset, 0, td["action"][:, t])
            torch.testing.assert_close(out["state"][:, t], state)
            prior_logits, _, belief = prior_net(state, belief, action)
            post_logits, state = posterior_net(belief, td["next", "encoded_latents"][:, t])
            torch.testing.assert_close(out["next", "prior_logits"][:, t], prior_logits)
            torch.testing.assert_close(out["next", "posterior_logits"][:, t], post_logits)
            torch.testing.assert_close(out["next", "state"][:, t], state)
            torch.testing.assert_close(out["next", "belief"][:, t], belief)
        with pytest.raises(KeyError, match=r"needs \('next', 'encoded_latents'\)"):
            rollout(td.exclude(("next", "encoded_latents")))
        with pytest.raises(TypeError, match="must be a TensorDictModule"):
            RSSMRolloutV3(prior_net, posterior_net)

    def test_state_estimator_resets_streams(self):
        torch.manual_seed(0)
        prior, posterior = (
            _prior(),
            RSSMPosteriorV3(
                hidden_dim=8, num_categoricals=2, num_classes=4, rnn_hidden_dim=8, obs_embed_dim=3
            ),
        )
        estimator = RSSMStateEstimatorV3(prior, posterior)
        data = TensorDict(
            state=torch.randn(2, 8),
            belief=torch.randn(2, 8),
            previous_action=torch.randn(2, 2),
            encoded_latents=torch.randn(2, 3),
            is_init=torch.tensor([True, False]),
            batch_size=[2],
        )
        expected_belief = prior.update_belief(
            torch.cat([torch.zeros(1, 8), data["state"][1:]]),
            torch.cat([torch.zeros(1, 8), data["belief"][1:]]),
            torch.cat([torch.zeros(1, 2), data["previous_action"][1:]]),
        )
        out = estimator(data.clone())
        torch.testing.assert_close(out["belief"], expected_belief)
        assert torch.equal(out["state"].reshape(2, 2, 4).sum(-1), torch.ones(2, 2))
        with pytest.raises(KeyError, match="needs 'encoded_latents'"):
            estimator(data.exclude("encoded_latents"))


class TestDreamerV3Policies:
    def test_discrete_actor(self):
        torch.manual_seed(0)
        actor = DreamerV3DiscreteActor(12, 3, depth=1, num_cells=16, unimix=0.5)
        data = TensorDict(state=torch.randn(5, 8), belief=torch.randn(5, 4), batch_size=[5])
        out = actor(data.clone())
        assert torch.equal(out["action"].sum(-1), torch.ones(5))
        probs = out["logits"].exp()
        assert (probs >= 0.5 / 3 - 1e-6).all()
        expected = (out["logits"] * out["action"]).sum(-1)
        torch.testing.assert_close(out["action_log_prob"], expected)
        with set_exploration_type(ExplorationType.DETERMINISTIC):
            greedy = actor(data.clone())["action"]
        assert torch.equal(greedy.argmax(-1), probs.argmax(-1))
        action = actor.get_dist(data.clone()).rsample()
        (action * torch.arange(3.0)).sum().backward()
        assert any(p.grad is not None for p in actor.parameters())
        with pytest.raises(ValueError, match="state and belief keys"):
            DreamerV3DiscreteActor(12, 3, in_keys=["state"])

    def test_seeded_policy_reproducible_and_isolated(self):
        actor = DreamerV3DiscreteActor(6, 4, depth=1, num_cells=8)
        policy = DreamerV3SeededPolicy(actor, seed=3)
        data = TensorDict(state=torch.zeros(64, 4), belief=torch.zeros(64, 2), batch_size=[64])
        saved = policy.state_dict()
        torch.manual_seed(123)
        first = policy(data.clone())["action"]
        after = torch.rand(3)
        torch.manual_seed(123)
        torch.testing.assert_close(after, torch.rand(3))  # the caller's stream did not move
        second = policy(data.clone())["action"]
        assert not torch.equal(first, second)
        policy.load_state_dict(saved)
        assert policy.counter == 0
        assert torch.equal(policy(data.clone())["action"], first)

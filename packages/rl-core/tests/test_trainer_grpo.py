"""GRPOTrainer: optimization steps per batch, gradient accumulation, weight pushes, the
on-policy buffer, reward logging and bad arguments, on a one-token "policy" whose
updates are computed by hand."""

from __future__ import annotations

import io
import logging
import math

import pytest
import torch
from tensordict import TensorDict

from rl.core.trainers import GRPOTrainer


class RecordingLogger:
    def __init__(self):
        self.calls = []

    def log_scalar(self, name, value, step=None):
        self.calls.append((name, float(value), step))


class ListBuffer:
    """What the trainer calls of a replay buffer: extend, sample without replacement
    (one pass, then a new one), len, empty; ``advantage`` is the reward (the role of
    MCAdvantage)."""

    def __init__(self, batch_size):
        self.batch_size = batch_size
        self.items = []
        self.order = []
        self.extends = 0

    def extend(self, data):
        self.extends += 1
        data = data.clone()
        data["advantage"] = data["next", "reward"]
        self.items.extend(data.unbind(0))

    def sample(self, batch_size=None):
        size = batch_size or self.batch_size
        if not self.order:
            self.order = list(range(len(self.items)))
        idx, self.order = self.order[:size], self.order[size:]
        return torch.stack([self.items[i] for i in idx])

    def __len__(self):
        return len(self.items)

    def empty(self, empty_write_count=True):
        self.items, self.order = [], []

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class Sender:
    def __init__(self, source, target):
        self.source, self.target, self.calls = source, target, 0

    def update_weights(self):
        self.calls += 1
        self.target.data.copy_(self.source.data)


def answers(actions, rewards):
    """A batch of one-token answers and their rewards."""
    n = len(actions)
    return TensorDict(
        {
            "action": torch.tensor(actions),
            "next": {"reward": torch.tensor(rewards, dtype=torch.float).reshape(n, 1)},
        },
        batch_size=[n],
    )


def make_loss(logits):
    def loss(td):
        logp = logits.log_softmax(-1)[td["action"]]
        adv = td.get("advantage", td["next", "reward"]).reshape(-1)
        return TensorDict(loss_objective=-(adv * logp).mean(), kl_to_ref=torch.tensor(0.25))

    return loss


def grad(logits, actions, adv):
    """The hand gradient of -mean(adv * log softmax(logits)[a])."""
    p = logits.detach().softmax(-1)
    g = torch.zeros_like(p)
    for a, w in zip(actions, adv):
        g -= w * (torch.nn.functional.one_hot(torch.tensor(a), p.numel()).float() - p)
    return g / len(actions)


class CountingBuffer(ListBuffer):
    """A ListBuffer with a write count (frames written since creation)."""

    def __init__(self, batch_size):
        super().__init__(batch_size)
        self.write_count = 0

    def extend(self, data):
        super().extend(data)
        self.write_count += data.numel()


class TestGRPOTrainer:
    def test_one_step_per_batch_without_buffer(self):
        logits = torch.nn.Parameter(torch.zeros(3))
        batches = [answers([0, 1, 2, 1], [0.0, 1.0, -1.0, 1.0]) for _ in range(2)]
        logger = RecordingLogger()
        trainer = GRPOTrainer(
            collector=batches,
            total_frames=8,
            loss_module=make_loss(logits),
            optimizer=torch.optim.SGD([logits], lr=0.5),
            clip_norm=None,
            logger=logger,
            log_interval=0,
            progress_bar=False,
        )
        expected = torch.zeros(3)
        for _ in range(2):
            expected = expected - 0.5 * grad(expected, [0, 1, 2, 1], [0.0, 1.0, -1.0, 1.0])
        trainer.train()
        assert trainer._optim_count == 2
        torch.testing.assert_close(logits.detach(), expected)
        logged = {name: value for name, value, _ in logger.calls}
        assert logged["reward_mean"] == pytest.approx(0.25)
        assert logged["reward_max"] == pytest.approx(1.0)
        assert logged["reward_mean_std"] == pytest.approx(
            torch.tensor([0.0, 1, -1, 1]).std().item()
        )
        assert logged["kl_to_ref"] == pytest.approx(0.25)  # the loss's diagnostics

    @pytest.mark.parametrize("num_epochs", [1, 2])
    def test_passes_over_the_buffer_then_push_and_empty(self, num_epochs):
        logits = torch.nn.Parameter(torch.zeros(3))
        copy = torch.zeros(3)
        sender = Sender(logits, copy)
        buffer = ListBuffer(batch_size=2)
        seen = []

        def loss(td):
            seen.append(td["action"].tolist())
            return make_loss(logits)(td)

        batches = [answers([0, 1, 2], [1.0, 0.0, -1.0]) for _ in range(3)]
        trainer = GRPOTrainer(
            collector=batches,
            total_frames=9,
            loss_module=loss,
            optimizer=torch.optim.SGD([logits], lr=0.1),
            replay_buffer=buffer,
            weight_sync_sender=sender,
            empty_replay_buffer_on_weight_update=True,
            num_epochs=num_epochs,
            progress_bar=False,
        )
        trainer.train()
        per_batch = math.ceil(3 / 2) * num_epochs  # every answer once per epoch
        assert trainer._optim_count == 3 * per_batch
        assert seen[:per_batch] == [[0, 1], [2]] * num_epochs
        assert buffer.extends == 3 and len(buffer) == 0  # emptied after each push
        assert sender.calls == 3  # one push per collected batch
        torch.testing.assert_close(copy, logits.detach())  # the collector's copy is current

    def test_gradient_accumulation(self):
        logits = torch.nn.Parameter(torch.zeros(2))
        buffer = ListBuffer(batch_size=1)
        trainer = GRPOTrainer(
            collector=[answers([0, 1], [1.0, 2.0])],
            total_frames=2,
            loss_module=make_loss(logits),
            optimizer=torch.optim.SGD([logits], lr=1.0),
            replay_buffer=buffer,
            gradient_accumulation_steps=2,
            clip_norm=None,
            progress_bar=False,
        )
        trainer.train()
        # one optimizer step on the mean of the two answers' gradients (each from logits 0)
        g = (grad(torch.zeros(2), [0], [1.0]) + grad(torch.zeros(2), [1], [2.0])) / 2
        torch.testing.assert_close(logits.detach(), -g)

    def test_async_pushes_every_k_optim_steps(self):
        logits = torch.nn.Parameter(torch.zeros(2))
        sender = Sender(logits, torch.zeros(2))
        trainer = GRPOTrainer(
            collector=[answers([0, 1], [1.0, 0.0]) for _ in range(3)],
            total_frames=6,
            optim_steps_per_batch=2,
            loss_module=make_loss(logits),
            optimizer=torch.optim.SGD([logits], lr=0.1),
            weight_sync_sender=sender,
            weight_update_frequency=3,
            async_collection=True,
            progress_bar=False,
        )
        trainer.train()
        assert trainer._optim_count == 6
        assert sender.calls == 2  # after optimizer steps 3 and 6

    def test_mixed_precision_bfloat16(self):
        logits = torch.nn.Parameter(torch.zeros(3))
        trainer = GRPOTrainer(
            collector=[answers([0, 1, 2, 1], [0.0, 1.0, -1.0, 1.0])],
            total_frames=4,
            loss_module=make_loss(logits),
            optimizer=torch.optim.SGD([logits], lr=0.5),
            mixed_precision=True,
            clip_norm=None,
            progress_bar=False,
        )
        trainer.train()
        expected = -0.5 * grad(torch.zeros(3), [0, 1, 2, 1], [0.0, 1.0, -1.0, 1.0])
        torch.testing.assert_close(logits.detach(), expected, atol=1e-2, rtol=1e-2)

    def test_collector_writing_into_the_buffer_yields_none(self):
        """A collector with its own replay buffer yields None: the frames are what the
        buffer took in, rewards are logged from the sampled batches."""
        logits = torch.nn.Parameter(torch.zeros(3))
        buffer = CountingBuffer(batch_size=2)

        class WritingCollector:
            replay_buffer = buffer

            def __iter__(self):
                for _ in range(2):
                    buffer.extend(answers([0, 1, 2, 1], [0.0, 1.0, -1.0, 1.0]))
                    yield None

        logger = RecordingLogger()
        trainer = GRPOTrainer(
            collector=WritingCollector(),
            total_frames=8,
            loss_module=make_loss(logits),
            optimizer=torch.optim.SGD([logits], lr=0.5),
            replay_buffer=buffer,
            empty_replay_buffer_on_weight_update=False,
            logger=logger,
            log_interval=0,
            progress_bar=False,
        )
        trainer.train()
        assert trainer.collected_frames == 8  # 4 answers written per collection
        assert buffer.extends == 2  # only the collector wrote: the trainer did not extend
        assert trainer._optim_count > 0
        logged = {name: value for name, value, _ in logger.calls}
        assert "reward_mean" in logged

    def test_buffer_write_count_survives_a_checkpoint(self):
        """A resumed run counts only the frames written after the checkpoint."""
        logits = torch.nn.Parameter(torch.zeros(3))
        buffer = CountingBuffer(batch_size=2)

        def make():
            return GRPOTrainer(
                collector=[],
                total_frames=8,
                loss_module=make_loss(logits),
                optimizer=torch.optim.SGD([logits], lr=0.5),
                replay_buffer=buffer,
                progress_bar=False,
            )

        trainer = make()
        buffer.extend(answers([0, 1, 2, 1], [0.0, 1.0, -1.0, 1.0]))
        assert trainer._frames_written() == 4
        restored = make()
        restored.load_state_dict(trainer.state_dict())
        buffer.extend(answers([0, 1], [0.0, 1.0]))
        assert restored._frames_written() == 2

    def test_async_collection_with_a_buffer_is_refused(self):
        logits = torch.nn.Parameter(torch.zeros(2))
        with pytest.raises(ValueError, match="async_collection=True\\) with a replay_buffer"):
            GRPOTrainer(
                collector=[],
                total_frames=2,
                loss_module=make_loss(logits),
                optimizer=torch.optim.SGD([logits], lr=0.1),
                replay_buffer=ListBuffer(batch_size=1),
                async_collection=True,
            )

    def test_bad_arguments(self):
        logits = torch.nn.Parameter(torch.zeros(2))
        kwargs = dict(collector=[], total_frames=2, loss_module=make_loss(logits))
        with pytest.raises(ValueError, match="requires an optimizer"):
            GRPOTrainer(**kwargs)
        opt = torch.optim.SGD([logits], lr=0.1)
        with pytest.raises(ValueError, match="num_epochs must be a positive int, got 0"):
            GRPOTrainer(**kwargs, optimizer=opt, num_epochs=0)
        with pytest.raises(
            ValueError, match="gradient_accumulation_steps must be a positive int, got 1.5"
        ):
            GRPOTrainer(**kwargs, optimizer=opt, gradient_accumulation_steps=1.5)
        with pytest.raises(TypeError, match="weight_sync_sender must have an update_weights"):
            GRPOTrainer(**kwargs, optimizer=opt, weight_sync_sender=object())


class OneToken(torch.nn.Module):
    """The one-token policy as a module, so that its logits are in the checkpoints."""

    def __init__(self, n):
        super().__init__()
        self.logits = torch.nn.Parameter(torch.zeros(n))

    def forward(self, td):
        return make_loss(self.logits)(td)


class TestGRPOTrainerSafety:
    """Non-finite losses never reach the weights; checkpoints resume mid-accumulation."""

    def test_a_non_finite_loss_drops_its_accumulation_cycle(self):
        logits = torch.nn.Parameter(torch.zeros(3))
        nan = float("nan")
        batches = [
            answers([0, 1], [1.0, 0.0]),  # accumulated, then dropped with the NaN's cycle
            answers([0, 1], [nan, 0.0]),
            answers([1, 2], [1.0, -1.0]),
            answers([2, 0], [2.0, 1.0]),
        ]
        trainer = GRPOTrainer(
            collector=batches,
            total_frames=8,
            loss_module=make_loss(logits),
            optimizer=torch.optim.SGD([logits], lr=1.0),
            gradient_accumulation_steps=2,
            clip_norm=None,
            progress_bar=False,
        )
        with pytest.warns(RuntimeWarning, match="the loss is non-finite \\(nan\\); 1 skipped"):
            trainer.train()
        assert trainer.skipped_nonfinite_steps == 1
        # one optimizer step, on the last two batches only (all gradients at logits 0)
        g = grad(torch.zeros(3), [1, 2], [1.0, -1.0]) + grad(torch.zeros(3), [2, 0], [2.0, 1.0])
        torch.testing.assert_close(logits.detach(), -g / 2)
        assert torch.isfinite(logits).all()

    def test_a_non_finite_gradient_skips_the_step(self):
        logits = torch.nn.Parameter(torch.zeros(2))

        def loss(td):  # finite (0) at logits 0, its gradient NaN (0 * inf)
            return TensorDict(loss_objective=logits.pow(2).sum().sqrt())

        trainer = GRPOTrainer(
            collector=[answers([0], [1.0]) for _ in range(2)],
            total_frames=2,
            loss_module=loss,
            optimizer=torch.optim.SGD([logits], lr=1.0),
            progress_bar=False,
            log_rewards=False,
        )
        with pytest.warns(RuntimeWarning, match="the gradient norm is non-finite"):
            trainer.train()
        assert trainer.skipped_nonfinite_steps == 2
        torch.testing.assert_close(logits.detach(), torch.zeros(2))
        assert logits.grad is None

    def test_a_float16_scaler_overflow_is_counted_and_reports_no_norm(self, caplog):
        logits = torch.nn.Parameter(torch.zeros(2))
        factors = iter([1.0, 1e35, 1.0])  # the 2nd batch's scaled gradient overflows

        def loss(td):
            return TensorDict(loss_objective=next(factors) * logits.sum())

        trainer = GRPOTrainer(
            collector=[answers([0], [1.0]) for _ in range(3)],
            total_frames=3,
            loss_module=loss,
            optimizer=torch.optim.SGD([logits], lr=0.5),
            mixed_precision=True,
            autocast_dtype=torch.float16,
            clip_norm=None,
            progress_bar=False,
            log_rewards=False,
        )
        seen = []
        trainer.register_op(
            "post_optim_complete_log",
            lambda steps, losses: seen.append("grad_norm_0" in losses.keys()),
        )
        with caplog.at_level(logging.INFO, logger="rl.core.trainers"):
            trainer.train()
        # two steps of gradient 1 (lr 0.5), the overflowing one skipped
        torch.testing.assert_close(logits.detach(), torch.full((2,), -1.0))
        assert trainer.skipped_nonfinite_steps == 1
        assert seen == [True, False, True]
        assert "grad scaler skipped the optimizer step" in caplog.text
        assert "1 skipped so far" in caplog.text

    @pytest.mark.filterwarnings("ignore:the collector")
    def test_a_checkpoint_mid_accumulation_resumes_exactly(self):
        """Save after 2 of 3 accumulated batches, load into a fresh trainer: the next
        steps give the weights of the uninterrupted run."""
        batches = [
            answers([0, 1, 2, 1], [1.0, 0.0, -1.0, 2.0]),
            answers([2, 2, 0, 1], [0.5, -1.0, 1.0, 0.0]),
            answers([1, 0, 0, 2], [-1.0, 2.0, 0.0, 1.0]),
        ]

        def make(collector, module):
            return GRPOTrainer(
                collector=collector,
                total_frames=12,
                loss_module=module,
                optimizer=torch.optim.Adam(module.parameters(), lr=0.1),
                replay_buffer=ListBuffer(batch_size=2),
                empty_replay_buffer_on_weight_update=True,
                gradient_accumulation_steps=3,
                progress_bar=False,
            )

        whole = OneToken(3)
        make(batches, whole).train()  # 6 optimization batches: 2 optimizer steps

        first = make(batches[:1], OneToken(3))
        first.total_frames = 4
        first.train()  # 2 optimization batches: mid-cycle
        assert first.state_dict()["hooks"]["optimizer"]["calls"] == 2
        buffer = io.BytesIO()
        torch.save(first.state_dict(), buffer)
        buffer.seek(0)
        fresh = OneToken(3)
        resumed = make(batches[1:], fresh)
        resumed.load_state_dict(torch.load(buffer, weights_only=True))
        resumed.train()
        assert resumed.collected_frames == 12
        torch.testing.assert_close(fresh.logits.detach(), whole.logits.detach())
        assert not torch.equal(whole.logits.detach(), torch.zeros(3))

    def test_a_checkpoint_of_other_parameters_is_refused(self):
        module = OneToken(3)
        trainer = GRPOTrainer(
            collector=[],
            total_frames=2,
            loss_module=make_loss(module.logits),
            optimizer=torch.optim.SGD(module.parameters(), lr=0.1),
            gradient_accumulation_steps=2,
            progress_bar=False,
        )
        hook = trainer._optimizer_hook
        state = hook.state_dict()
        state["grads"] = [None, None]
        with pytest.raises(ValueError, match="gradients of 2 parameters, the optimizer has 1"):
            hook.load_state_dict(state)

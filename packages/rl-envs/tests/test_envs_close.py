"""Closing envs: TorchRL's close(raise_if_closed=...) signature, idempotent in rl."""


def test_close_takes_torchrl_raise_if_closed_and_stays_idempotent():
    from rl.envs import GymEnv, SerialEnv, TransformedEnv
    from rl.envs.transforms import StepCounter

    for env in (
        GymEnv("CartPole-v1"),
        SerialEnv(2, lambda: GymEnv("CartPole-v1")),
        TransformedEnv(GymEnv("CartPole-v1"), StepCounter()),
    ):
        env.reset()
        env.close(raise_if_closed=False)
        assert env.is_closed
        env.close(raise_if_closed=True)  # a second close is a no-op
        assert env.is_closed

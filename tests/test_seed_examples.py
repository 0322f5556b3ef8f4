"""The runnable snippets of the seed documents (/work/shared/seeds), against ``rl``.

Each test runs one snippet as written, with ``torchrl.X`` replaced by the ``rl`` package
that DESIGN.md maps it to (``torchrl.envs.libs.gym`` -> ``rl.envs.libs.gym``,
``torchrl.envs.utils`` -> ``rl.envs.utils``, ``torchrl.envs`` -> ``rl.envs``, spec classes
of ``torchrl.data`` -> ``rl.core``, ``torchrl.modules`` -> ``rl.modules``,
``torchrl.objectives`` -> ``rl.objectives``, ``torchrl.collectors`` -> ``rl.collectors``,
replay buffers -> ``rl.data``), and checks the values, shapes and keys the document
prints or implies. Where a snippet elides code (``...``, "assuming a collector, a loss
... have been instantiated"), the smallest stand-in with the same signature is used. The
seed files are named by their prefix: 000 and 002 are TorchRL's README at two ages, 001
and 004 documentation pages, 003 the ICML 2022 tutorial.

Where a seed uses a name or argument that TorchRL 0.14 itself no longer has, the test
follows TorchRL 0.14 and says so at the snippet: ``NormalParamsWrapper`` (removed; its
docs end the network with ``NormalParamExtractor``), ``MLP(activation=...)``
(``activation_class``), ``set_exploration_mode`` (``set_exploration_type``),
``MultiaSyncDataCollector(devices=...)`` (``device=``), the ``"sample_log_prob"`` key
(tensordict 0.15 writes ``"action_log_prob"``), and a bare ``MLP`` as
``ActorValueOperator``'s value head (wrapped in a ``ValueOperator``). Budgets are cut to
keep the file fast (the PPO script, the multiprocess collector loop).

The multiprocess collectors of 003 l.717-817 run as written: the tutorial's untrained
``nn.Linear`` actor writes actions outside Pendulum's [-2, 2], which rl's collectors pass
on with a warning (gym clips them), as TorchRL's pass them on.

Covered elsewhere: the replay-buffer snippets (000 l.120, 002 l.352-383, 003 l.135-198)
run in packages/rl-data/tests/test_data_seeds.py.

Left out: 002 l.372-383, ``D4RLExperienceReplay`` (offline datasets; the sampler import
runs in rl-data's tests), and the prose of the seeds that is not code.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule, TensorDictSequential
from torch import nn

_cuda = torch.cuda.is_available()


def _words(text: str) -> list[str]:
    """``text`` split on whitespace: compares reprs up to their indentation."""
    return text.split()


# --------------------------------------------------------------------------- TensorDict


def test_tutorial_tensordict_create():
    # 003 l.17-35
    batch_size = 5
    tensordict = TensorDict(
        source={
            "key 1": torch.zeros(batch_size, 3),
            "key 2": torch.zeros(batch_size, 5, 6, dtype=torch.bool),
        },
        batch_size=[batch_size],
    )
    assert tensordict.batch_size == torch.Size([5])
    assert tensordict["key 1"].shape == (5, 3) and tensordict["key 1"].dtype == torch.float32
    assert tensordict["key 2"].shape == (5, 5, 6) and tensordict["key 2"].dtype == torch.bool
    assert tensordict.device is None and not tensordict.is_shared()

    # 003 l.36-46: indexing and querying keys
    sub = tensordict[2]
    assert sub.batch_size == torch.Size([])
    assert sub["key 1"].shape == (3,) and sub["key 2"].shape == (5, 6)
    assert tensordict["key 1"] is tensordict.get("key 1")


def test_tutorial_tensordict_stack_and_ops():
    # 003 l.47-109
    batch_size = 5
    tensordict1 = TensorDict(
        source={
            "key 1": torch.zeros(batch_size, 1),
            "key 2": torch.zeros(batch_size, 5, 6, dtype=torch.bool),
        },
        batch_size=[batch_size],
    )
    tensordict2 = TensorDict(
        source={
            "key 1": torch.ones(batch_size, 1),
            "key 2": torch.ones(batch_size, 5, 6, dtype=torch.bool),
        },
        batch_size=[batch_size],
    )
    tensordict = torch.stack([tensordict1, tensordict2], 0)
    assert tensordict.batch_size == torch.Size([2, 5])
    torch.testing.assert_close(
        tensordict["key 1"], torch.stack([torch.zeros(5, 1), torch.ones(5, 1)])
    )

    assert tensordict.view(-1).batch_size == torch.Size([10])
    assert tensordict.view(-1).get("key 1").shape == (10, 1)
    on_cpu = tensordict.to("cpu")
    assert on_cpu.device == torch.device("cpu") and on_cpu["key 2"].shape == (2, 5, 5, 6)
    shared = tensordict.share_memory_()
    assert shared.is_shared() and shared["key 1"].is_shared()
    assert tensordict.permute(1, 0).batch_size == torch.Size([5, 2])
    assert tensordict.permute(1, 0).get("key 1").shape == (5, 2, 1)
    assert tensordict.expand(3, *tensordict.batch_size).batch_size == torch.Size([3, 2, 5])
    assert tensordict.expand(3, *tensordict.batch_size).get("key 1").shape == (3, 2, 5, 1)


def test_tutorial_tensordict_nested():
    # 003 l.110-133
    batch_size = 5
    tensordict = TensorDict(
        source={
            "key 1": torch.zeros(batch_size, 3),
            "key 2": TensorDict(
                source={"sub-key 1": torch.zeros(batch_size, 2, 1)},
                batch_size=[batch_size, 2],
            ),
        },
        batch_size=[batch_size],
    )
    assert tensordict.batch_size == torch.Size([5])
    assert tensordict["key 2"].batch_size == torch.Size([5, 2])
    assert tensordict["key 2", "sub-key 1"].shape == (5, 2, 1)


def test_readme_tensordict_operations():
    # 002 l.236-252 (000 l.54-66): list_of_tensordicts and sub_tensordict are not defined
    # in the README, and each line starts from the previous result; here they are three
    # [4, 3, 3] tensordicts and a [2, 3] one, and the reshapes start from the cat.
    list_of_tensordicts = [
        TensorDict({"obs": torch.randn(4, 3, 3, 5), "next": {"r": torch.randn(4, 3, 3)}}, [4, 3, 3])
        for _ in range(3)
    ]
    # stack and cat
    tensordict = torch.stack(list_of_tensordicts, 0)
    assert tensordict.batch_size == (3, 4, 3, 3)
    tensordict = torch.cat(list_of_tensordicts, 0)
    assert tensordict.batch_size == (12, 3, 3)
    # reshape
    assert tensordict.view(-1).batch_size == (108,)
    assert tensordict.view(-1)["obs"].shape == (108, 5)
    tensordict = tensordict.permute(0, 2, 1)
    assert tensordict.batch_size == (12, 3, 3)
    torch.testing.assert_close(tensordict["next", "r"][:4], list_of_tensordicts[0]["next", "r"].mT)
    tensordict = tensordict.unsqueeze(-1)
    assert tensordict.batch_size == (12, 3, 3, 1) and tensordict["obs"].shape == (12, 3, 3, 1, 5)
    tensordict = tensordict.squeeze(-1)
    assert tensordict.batch_size == (12, 3, 3)
    # indexing
    tensordict = tensordict[:2]
    assert tensordict.batch_size == (2, 3, 3)
    tensordict = tensordict.contiguous()
    sub_tensordict = TensorDict(
        {"obs": torch.zeros(2, 3, 5), "next": {"r": torch.zeros(2, 3)}}, [2, 3]
    )
    tensordict[:, 2] = sub_tensordict
    assert (tensordict[:, 2]["obs"] == 0).all() and (tensordict[:, 2]["next", "r"] == 0).all()
    # device and memory location
    if _cuda:
        assert tensordict.cuda().device.type == "cuda"
    tensordict.share_memory_()
    assert tensordict.is_shared()


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
def test_readme_td_module_transformer():
    # 002 l.262-271 (000 l.72-79), with SafeModule -> TensorDictModule (torchrl.modules is
    # a later stage). The README's batch_size=[20, 32] does not fit src's [10, 32] (tensordict
    # raises, checked below), so the tensordict here has no batch dims.
    transformer_model = nn.Transformer(nhead=16, num_encoder_layers=12)
    transformer_model.eval()  # no dropout, so that the two calls below agree
    td_module = TensorDictModule(transformer_model, in_keys=["src", "tgt"], out_keys=["out"])
    src = torch.rand((10, 32, 512))
    tgt = torch.rand((20, 32, 512))
    with pytest.raises(RuntimeError):
        TensorDict({"src": src, "tgt": tgt}, batch_size=[20, 32])
    tensordict = TensorDict({"src": src, "tgt": tgt}, batch_size=[])
    td_module(tensordict)
    out = tensordict["out"]
    assert out.shape == (20, 32, 512)
    torch.testing.assert_close(out, transformer_model(src, tgt))


def test_readme_td_sequential_subsequence():
    # 002 l.273-289 (000 l.81-94). TransformerEncoder(...) / TransformerDecoder(...) are
    # elided in the README; small stand-ins with the same signatures run here. 002 wraps
    # the encoder in TensorDictSequential(encoder_module, in_keys=..., out_keys=...), a typo
    # for TensorDictModule (as 000 writes it).
    class TransformerEncoder(nn.Module):
        def forward(self, src, src_mask):
            return src * src_mask

    class TransformerDecoder(nn.Module):
        def forward(self, tgt, memory):
            return tgt + memory

    encoder_module = TransformerEncoder()
    encoder = TensorDictModule(encoder_module, in_keys=["src", "src_mask"], out_keys=["memory"])
    decoder_module = TransformerDecoder()
    decoder = TensorDictModule(decoder_module, in_keys=["tgt", "memory"], out_keys=["output"])
    transformer = TensorDictSequential(encoder, decoder)
    assert transformer.in_keys == ["src", "src_mask", "tgt"]
    assert transformer.out_keys == ["memory", "output"]

    enc = transformer.select_subsequence(out_keys=["memory"])  # returns the encoder
    dec = transformer.select_subsequence(in_keys=["tgt", "memory"])  # returns the decoder
    assert enc.out_keys == ["memory"] and dec.out_keys == ["output"]
    td = TensorDict({"src": torch.ones(3), "src_mask": torch.ones(3) * 2, "tgt": torch.ones(3)})
    transformer(td)
    torch.testing.assert_close(td["output"], torch.full((3,), 3.0))


def test_doc_tensordict_basics():
    # 004 l.14-28
    td = TensorDict(
        {
            "observation": torch.randn(32, 8),
            "action": torch.randn(32, 2),
            "reward": torch.randn(32, 1),
        },
        batch_size=[32],
    )
    assert td.batch_size == torch.Size([32])
    assert td["observation"].shape == torch.Size([32, 8])

    # 004 l.141-153: the critic reads "observation" and writes "state_value"
    critic_net = TensorDictModule(
        nn.Sequential(nn.LazyLinear(256), nn.Tanh(), nn.Linear(256, 1)),
        in_keys=["observation"],
        out_keys=["state_value"],
    )
    td = critic_net(td)
    assert td["state_value"].shape == (32, 1)  # [B, 1]


def test_doc_batch_operations_and_nested_keys():
    # 001 l.22-31, 004 l.34-58 and l.122-135: list_of_tensordicts is not defined in the
    # docs; here it is a list of transitions with the nested keys the docs read.
    B, n_agents, obs_dim, hidden_dim = 4, 3, 5, 7
    list_of_tensordicts = [
        TensorDict(
            {
                "observation": torch.randn(B, obs_dim),
                "next": {"observation": torch.randn(B, obs_dim), "reward": torch.randn(B, 1)},
                "agents": {"observation": torch.randn(B, n_agents, obs_dim)},
                "recurrent_state": {"h": torch.randn(B, hidden_dim)},
            },
            batch_size=[B],
        )
        for _ in range(80)
    ]
    batch = torch.stack(list_of_tensordicts, dim=0)
    assert batch.batch_size == (80, B)
    batch = batch.reshape(-1)
    assert batch.batch_size == (80 * B,)
    if _cuda:
        assert batch.to("cuda").device.type == "cuda"
    mini_batch = batch[:128]
    assert mini_batch.batch_size == (128,)

    reward = batch["next", "reward"]  # shape: [B, 1]
    next_obs = batch["next", "observation"]  # shape: [B, obs_dim]
    agent_obs = batch["agents", "observation"]  # shape: [B, n_agents, obs_dim]
    h = batch["recurrent_state", "h"]  # shape: [B, hidden_dim]
    assert reward.shape == (320, 1) and next_obs.shape == (320, obs_dim)
    assert agent_obs.shape == (320, n_agents, obs_dim) and h.shape == (320, hidden_dim)

    sizes = []
    for i in range(0, len(batch), 128):
        mini = batch[i : i + 128]
        assert isinstance(mini, TensorDict)
        sizes.append(mini.batch_size[0])
    assert sizes == [128, 128, 64]


def test_tutorial_td_module():
    # 003 l.368-380
    tensordict = TensorDict({"key 1": torch.randn(10, 3)}, batch_size=[10])
    module = nn.Linear(3, 4)
    td_module = TensorDictModule(module, in_keys=["key 1"], out_keys=["key 2"])
    td_module(tensordict)
    assert set(tensordict.keys()) == {"key 1", "key 2"}
    assert tensordict["key 2"].shape == (10, 4)
    torch.testing.assert_close(tensordict["key 2"], module(tensordict["key 1"]))


def test_tutorial_td_sequence():
    # 003 l.381-452 without the MLP value head (torchrl.modules is a later stage), and the
    # functional call of l.453-524 on that two-module sequence.
    backbone_module = nn.Linear(5, 3)
    backbone = TensorDictModule(backbone_module, in_keys=["observation"], out_keys=["hidden"])
    actor_module = nn.Linear(3, 4)
    actor = TensorDictModule(actor_module, in_keys=["hidden"], out_keys=["action"])
    sequence = TensorDictSequential(backbone, actor)
    assert sequence.in_keys == ["observation"]
    assert sequence.out_keys == ["hidden", "action"]

    tensordict = TensorDict({"observation": torch.randn(3, 5)}, [3])
    backbone(tensordict)
    actor(tensordict)
    assert tensordict["hidden"].shape == (3, 3) and tensordict["action"].shape == (3, 4)
    step_by_step = tensordict["action"]

    tensordict = TensorDict({"observation": tensordict["observation"]}, [3])
    sequence(tensordict)
    torch.testing.assert_close(tensordict["action"], step_by_step)

    params = TensorDict.from_module(sequence)
    assert params["module", "0", "module", "weight"].shape == (3, 5)
    assert params["module", "1", "module", "bias"].shape == (4,)
    with params.to_module(sequence):
        sequence(tensordict)
    torch.testing.assert_close(tensordict["action"], step_by_step)


# ------------------------------------------------------------------ specs and exploration


def test_tutorial_bounded_spec():
    # 003 l.536-549: the spec of the SafeModule example (SafeModule is a later stage).
    from rl.core import BoundedTensorSpec

    torch.manual_seed(0)
    with pytest.warns(DeprecationWarning, match="use Bounded"):  # the old name still works
        spec = BoundedTensorSpec(-torch.ones(3), torch.ones(3))
    assert spec.shape == (3,) and spec.dtype == torch.float32
    assert spec.is_in(spec.rand())
    # safe=True projects the module's output within the set: [-1., 1., -1.] in the tutorial
    out = torch.tensor([-53.0, 12.0, -0.5]) * 100
    assert not spec.is_in(out)
    torch.testing.assert_close(spec.project(out), torch.tensor([-1.0, 1.0, -1.0]))


def test_tutorial_exploration_type():
    # 003 l.609-621 and 002 l.187-191: the exploration-type context managers. The tutorial's
    # policy samples a TanhNormal (torchrl.modules, a later stage); tensordict's Normal here.
    from tensordict.nn import (
        NormalParamExtractor,
        ProbabilisticTensorDictModule,
        ProbabilisticTensorDictSequential,
    )

    from rl.envs.utils import ExplorationType, set_exploration_type

    net = nn.Sequential(nn.Linear(5, 4), NormalParamExtractor())
    module = TensorDictModule(net, in_keys=["input"], out_keys=["loc", "scale"])
    td_module = ProbabilisticTensorDictSequential(
        module,
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=torch.distributions.Normal,
        ),
    )
    td = TensorDict({"input": torch.randn(3, 5)}, [3])
    torch.manual_seed(0)
    with set_exploration_type(ExplorationType.RANDOM):
        td_module(td)
        random = td["action"].clone()
    with set_exploration_type(ExplorationType.MODE):
        td_module(td)
        torch.testing.assert_close(td["action"], td["loc"])
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        td_module(td)
        torch.testing.assert_close(td["action"], td["loc"])
    assert not torch.allclose(random, td["loc"])


# --------------------------------------------------------------------------- environments


def test_doc_quick_rollout():
    # 001 l.76-99 and 004 l.92-116 (the same snippet)
    from rl.envs import PendulumEnv, StepCounter, TransformedEnv

    # A PyTorch-native environment with a transform stack.
    env = TransformedEnv(PendulumEnv(), StepCounter(max_steps=200))

    # Policies are regular nn.Modules with explicit TensorDict key contracts.
    policy = TensorDictModule(
        nn.Sequential(
            nn.LazyLinear(64),
            nn.Tanh(),
            nn.Linear(64, 1),
            nn.Tanh(),
        ),
        in_keys=["observation"],
        out_keys=["action"],
    )

    rollout = env.rollout(max_steps=32, policy=policy)
    assert rollout.batch_size == torch.Size([32])
    assert rollout["next", "reward"].shape[:1] == torch.Size([32])
    # "every step's observation, action, reward, done flag, and step count are aligned"
    assert rollout["action"].shape == (32, 1) and rollout["observation"].shape == (32, 3)
    assert rollout["next", "step_count"][:, 0].tolist() == list(range(1, 33))
    assert not rollout["next", "done"].any()
    torch.testing.assert_close(rollout["observation"][1:], rollout["next", "observation"][:-1])


def test_readme_ppo_env_and_model():
    # 002 l.94-165: the env and the actor's TensorDictModule of the PPO script (the
    # ValueOperator, ProbabilisticActor, collector, loss and GAE are later stages).
    from tensordict.nn.distributions import NormalParamExtractor

    from rl.envs.libs.gym import GymEnv

    env = GymEnv("Pendulum-v1")
    model = TensorDictModule(
        nn.Sequential(
            nn.Linear(3, 128),
            nn.Tanh(),
            nn.Linear(128, 128),
            nn.Tanh(),
            nn.Linear(128, 128),
            nn.Tanh(),
            nn.Linear(128, 2),
            NormalParamExtractor(),
        ),
        in_keys=["observation"],
        out_keys=["loc", "scale"],
    )
    td = model(env.reset())
    assert td["loc"].shape == env.action_spec.shape == (1,)
    assert (td["scale"] > 0).all()


def test_readme_rollout_loop():
    # 002 l.180-199 / 000 l.21-36: the "+" lines of the diff. The README leaves env, model
    # and n_steps undefined and names the observations "observation_pixels" and
    # "observation_vector"; a pixel Pendulum with those keys renamed stands in.
    # SafeModule (002) is a TensorDictModule (000). n_steps is 5 to keep the test fast.
    from rl.envs import RenameTransform, TransformedEnv
    from rl.envs.libs.gym import GymEnv
    from rl.envs.utils import step_mdp

    env = TransformedEnv(
        GymEnv("Pendulum-v1", from_pixels=True, pixels_only=False),
        RenameTransform(["pixels", "observation"], ["observation_pixels", "observation_vector"]),
    )

    class Model(nn.Module):
        def forward(self, pixels, vector):
            return torch.tanh(pixels.float().mean((-3, -2, -1)).unsqueeze(-1) + vector[..., :1])

    model = Model()
    n_steps = 5

    tensordict = env.reset()
    policy = TensorDictModule(
        model,
        in_keys=["observation_pixels", "observation_vector"],
        out_keys=["action"],
    )
    out = []
    for _i in range(n_steps):
        tensordict = policy(tensordict)
        tensordict = env.step(tensordict)
        out.append(tensordict)
        tensordict = step_mdp(tensordict)  # renames next_observation_* keys to observation_*
    out = torch.stack(out, 0)  # TensorDict supports multiple tensor operations

    assert out.batch_size == (n_steps,)
    assert out["observation_pixels"].shape == (n_steps, 500, 500, 3)
    assert out["next", "observation_vector"].shape == (n_steps, 3)
    assert out["action"].shape == (n_steps, 1) and out["next", "reward"].shape == (n_steps, 1)
    torch.testing.assert_close(
        out["observation_vector"][1:], out["next", "observation_vector"][:-1]
    )
    assert "observation_pixels" in tensordict.keys() and "next" not in tensordict.keys()


def test_readme_parallel_env_rollout():
    # 002 l.309-315 / 000 l.103-107. mp_start_method="fork" is added: the default "spawn"
    # imports torch, gymnasium and pygame in each of the 4 workers (about 15 s on 2 cores).
    # The README's `tensordict.shape == [4, 20]` compares a torch.Size (a tuple) with a
    # list, which is False in TorchRL too; the shape is compared with a torch.Size.
    # The README's `action_spec.is_in(tensordict["action"])`: see below.
    from rl.envs import ParallelEnv
    from rl.envs.libs.gym import GymEnv

    env_make = lambda: GymEnv("Pendulum-v1", from_pixels=True)  # noqa: E731
    env_parallel = ParallelEnv(4, env_make, mp_start_method="fork")  # 4 envs in parallel
    try:
        tensordict = env_parallel.rollout(max_steps=20, policy=None)  # random rollout
        assert tensordict.shape == torch.Size([4, 20])  # 4 envs, 20 steps rollout
        # "spec check returns True": the spec is [4, 1], one step of the 4 envs, so each
        # step's actions are checked (the [4, 20, 1] block is not of that shape: rl answers
        # False, TorchRL's broadcast raises)
        spec = env_parallel.action_spec
        assert all(spec.is_in(tensordict["action"][:, t]) for t in range(20))
        assert not spec.is_in(tensordict["action"])
        assert tensordict["pixels"].shape == (4, 20, 500, 500, 3)
        assert "observation" not in tensordict.keys()  # from_pixels: pixels only
    finally:
        env_parallel.close()


def test_readme_transforms_on_device():
    # 002 l.393-417 / 000 l.128-144. The README puts the env on "cuda:0"; where no GPU is
    # present it runs on the CPU. "fork" as in test_readme_parallel_env_rollout.
    # ObservationNorm without in_keys normalises "observation", which this pixel-only env
    # does not have: as written, a step raises (checked below); it is given the pixels.
    from rl.envs import (
        Compose,
        NoopResetEnv,
        ObservationNorm,
        ParallelEnv,
        ToTensorImage,
        TransformedEnv,
    )
    from rl.envs.libs.gym import GymEnv

    device = "cuda:0" if _cuda else "cpu"
    env_make = lambda: GymEnv("Pendulum-v1", from_pixels=True)  # noqa: E731
    env_base = ParallelEnv(4, env_make, device=device, mp_start_method="fork")
    try:
        as_written = TransformedEnv(
            env_base, Compose(ToTensorImage(), ObservationNorm(loc=0.5, scale=1.0))
        )
        with pytest.raises(KeyError, match="ObservationNorm expected in_key 'observation'"):
            as_written.rand_step(as_written.reset())

        env = TransformedEnv(
            env_base,
            Compose(
                ToTensorImage(), ObservationNorm(loc=0.5, scale=1.0, in_keys=["pixels"])
            ),  # executes the transforms once and on device
        )
        tensordict = env.reset()
        assert tensordict.device == torch.device(device)
        assert tensordict["pixels"].shape == (4, 3, 500, 500)
        assert tensordict["pixels"].dtype == torch.float32
        assert 0.5 <= tensordict["pixels"].min() and tensordict["pixels"].max() <= 1.5

        env.insert_transform(0, NoopResetEnv())  # inserts NoopResetEnv at the index 0
        assert isinstance(env.transform[0], NoopResetEnv)

        transform = env.transform[1]  # gathers the second transform of the list
        parent_env = transform.parent  # the base env + the first transform
        assert isinstance(transform, ToTensorImage)
        assert isinstance(parent_env, TransformedEnv)
        assert [type(t) for t in parent_env.transform] == [NoopResetEnv]
        assert parent_env.base_env is env_base
    finally:
        env_base.close()


def test_tutorial_gym_env_and_wrapper():
    # 003 l.192-225
    try:
        import gymnasium as gym
    except ModuleNotFoundError:
        import gym
    from rl.envs.libs.gym import GymEnv, GymWrapper

    gym_env = gym.make("Pendulum-v1")
    env = GymWrapper(gym_env)
    assert env.action_spec.shape == (1,)
    env = GymEnv("Pendulum-v1")
    tensordict = env.reset()
    out = env.rand_step(tensordict)
    root = {"action", "done", "observation", "terminated", "truncated"}
    assert set(out.keys()) == root | {"next"}
    assert set(out["next"].keys()) == {"done", "observation", "reward", "terminated", "truncated"}
    assert out.batch_size == torch.Size([]) and out["next"].batch_size == torch.Size([])
    assert out["action"].shape == (1,) and out["action"].dtype == torch.float32
    for key in ("done", "terminated", "truncated"):
        assert out[key].shape == (1,) and out[key].dtype == torch.bool
        assert out["next", key].shape == (1,) and out["next", key].dtype == torch.bool
    assert out["observation"].shape == out["next", "observation"].shape == (3,)
    assert out["next", "reward"].shape == (1,) and out["next", "reward"].dtype == torch.float32


def test_tutorial_env_config_pixels():
    # 003 l.226-240
    from rl.envs.libs.gym import GymEnv

    env = GymEnv("Pendulum-v1", frame_skip=3, from_pixels=True, pixels_only=False)
    td = env.reset()
    assert set(td.keys()) == {"done", "observation", "pixels", "terminated", "truncated"}
    assert td["pixels"].shape == (500, 500, 3) and td["pixels"].dtype == torch.uint8
    assert td["observation"].shape == (3,) and td["done"].shape == (1,)
    env.close()
    del env


def test_tutorial_transforms():
    # 003 l.241-298 (l.241-256 builds the same env)
    from rl.envs import (
        Compose,
        NoopResetEnv,
        ObservationNorm,
        StepCounter,  # noqa: F401  (imported by the tutorial, used in the next section)
        ToTensorImage,
        TransformedEnv,
    )
    from rl.envs.libs.gym import GymEnv

    base_env = GymEnv("Pendulum-v1", frame_skip=3, from_pixels=True, pixels_only=False)
    env = TransformedEnv(base_env, Compose(NoopResetEnv(3), ToTensorImage()))
    env.append_transform(ObservationNorm(in_keys=["pixels"], loc=2, scale=1))
    assert [type(t) for t in env.transform] == [NoopResetEnv, ToTensorImage, ObservationNorm]
    assert env.transform[0].noops == 3 and env.transform[0].random
    # the repr the tutorial prints (l.251-256 and l.288-293), up to indentation
    assert _words(repr(env)) == _words(
        """TransformedEnv(
            env=GymEnv(env=Pendulum-v1, batch_size=torch.Size([]), device=None),
            transform=Compose(
                    NoopResetEnv(noops=3, random=True),
                    ToTensorImage(keys=['pixels']),
                    ObservationNorm(loc=2.0000, scale=1.0000, keys=['pixels'])))"""
    )

    td = env.reset()
    assert set(td.keys()) == {"done", "observation", "pixels", "terminated", "truncated"}
    assert td["pixels"].shape == (3, 500, 500) and td["pixels"].dtype == torch.float32
    # ToTensorImage maps to [0, 1], ObservationNorm adds loc=2
    assert 2.0 <= td["pixels"].min() and td["pixels"].max() <= 3.0
    assert td["observation"].shape == (3,)

    parent = env.transform[2].parent  # the base env and the first two transforms
    assert isinstance(parent, TransformedEnv)
    assert [type(t) for t in parent.transform] == [NoopResetEnv, ToTensorImage]
    assert _words(repr(parent)) == _words(  # l.294-298
        """TransformedEnv(
            env=GymEnv(env=Pendulum-v1, batch_size=torch.Size([]), device=None),
            transform=Compose(
                    NoopResetEnv(noops=3, random=True),
                    ToTensorImage(keys=['pixels'])))"""
    )


def test_tutorial_vectorized_envs():
    # 003 l.299-332
    from rl.envs import (
        Compose,
        ObservationNorm,
        ParallelEnv,
        StepCounter,
        ToTensorImage,
        TransformedEnv,
    )
    from rl.envs.libs.gym import GymEnv

    base_env = ParallelEnv(
        4,
        lambda: GymEnv("Pendulum-v1", frame_skip=3, from_pixels=True, pixels_only=False),
        mp_start_method="fork",  # This will break on Windows machines!
    )
    env = TransformedEnv(
        base_env, Compose(StepCounter(), ToTensorImage())
    )  # applies transforms on batch of envs
    env.append_transform(ObservationNorm(in_keys=["pixels"], loc=2, scale=1))
    try:
        td = env.reset()
        assert td.batch_size == torch.Size([4])
        keys = {"done", "observation", "pixels", "step_count", "terminated", "truncated"}
        assert set(td.keys()) == keys
        assert td["pixels"].shape == (4, 3, 500, 500) and td["pixels"].dtype == torch.float32
        assert td["step_count"].shape == (4, 1) and td["step_count"].dtype == torch.int64
        assert td["observation"].shape == (4, 3) and td["done"].shape == (4, 1)
        from rl.core import Bounded

        assert isinstance(env.action_spec, Bounded)
        assert env.action_spec.shape == (4, 1) and env.action_spec.dtype == torch.float32
        assert env.action_spec.space.low.shape == (4, 1)
    finally:
        env.close()
        del env


def test_tutorial_env_and_module_loops():
    # 003 l.631-716. The tutorial gives the actor the env's action spec so that its
    # actions lie in Pendulum's [-2, 2]; SafeModule projects onto the spec only with
    # safe=True (in TorchRL too), so safe=True is added here.
    from rl.envs.libs.gym import GymEnv
    from rl.envs.utils import step_mdp
    from rl.modules import SafeModule

    env = GymEnv("Pendulum-v1")
    action_spec = env.action_spec
    actor_module = nn.Linear(3, 1)
    actor = SafeModule(
        actor_module, spec=action_spec, in_keys=["observation"], out_keys=["action"], safe=True
    )
    assert action_spec.shape == (1,)
    assert actor.spec["action"] is action_spec or actor.spec["action"] == action_spec

    torch.manual_seed(0)
    env.set_seed(0)
    max_steps = 100
    tensordict = env.reset()
    tensordicts = TensorDict({}, [max_steps])
    for i in range(max_steps):
        actor(tensordict)
        tensordicts[i] = env.step(tensordict)
        if tensordict["done"].any():
            break
        tensordict = step_mdp(tensordict)  # roughly equivalent to obs = next_obs
    tensordicts_prealloc = tensordicts.clone()
    assert i == 99  # "total steps: 99"
    assert tensordicts.batch_size == (100,)
    assert tensordicts["next", "observation"].shape == (100, 3)
    assert tensordicts["action"].shape == (100, 1) and tensordicts["done"].shape == (100, 1)
    assert action_spec.is_in(tensordicts["action"])  # projected: within [-2, 2]
    with torch.no_grad():
        raw = actor_module(tensordicts["observation"])
        torch.testing.assert_close(tensordicts["action"], raw.clamp(-2.0, 2.0))

    # equivalent
    torch.manual_seed(0)
    env.set_seed(0)
    max_steps = 100
    tensordict = env.reset()
    tensordicts = []
    for _ in range(max_steps):
        actor(tensordict)
        tensordicts.append(env.step(tensordict))
        if tensordict["done"].any():
            break
        tensordict = step_mdp(tensordict)  # roughly equivalent to obs = next_obs
    tensordicts_stack = torch.stack(tensordicts, 0)
    assert tensordicts_stack.batch_size == (100,)
    assert (tensordicts_stack == tensordicts_prealloc).all()

    torch.manual_seed(0)
    env.set_seed(0)
    tensordict_rollout = env.rollout(policy=actor, max_steps=max_steps)
    assert (tensordict_rollout == tensordicts_prealloc).all()


def test_tutorial_serial_env_creator():
    # 003 l.719-729: the batched env the tutorial hands to its collectors (the collectors
    # are a later stage); a rollout shows the [3 envs, T steps] layout they collect.
    from rl.envs import EnvCreator, SerialEnv
    from rl.envs.libs.gym import GymEnv

    parallel_env = SerialEnv(
        3,
        EnvCreator(lambda: GymEnv("Pendulum-v1")),
    )
    actor_module = nn.Linear(3, 1)
    actor = TensorDictModule(actor_module, in_keys=["observation"], out_keys=["action"])
    d = parallel_env.rollout(20, actor)
    assert d.batch_size == (3, 20)
    assert d["action"].shape == (3, 20, 1) and d["next", "observation"].shape == (3, 20, 3)
    assert d["next", "reward"].shape == (3, 20, 1) and d["next", "done"].shape == (3, 20, 1)
    parallel_env.close()


# ------------------------------------------------------------------ models and modules


def test_tutorial_mlp_and_convnet():
    # 003 l.336-366
    from rl.modules import MLP, ConvNet
    from rl.modules.models.utils import SquashDims

    net = MLP(num_cells=[32, 64], out_features=4, activation_class=nn.ELU)
    assert _words(repr(net)) == _words(
        """MLP(
          (0): LazyLinear(in_features=0, out_features=32, bias=True)
          (1): ELU(alpha=1.0)
          (2): Linear(in_features=32, out_features=64, bias=True)
          (3): ELU(alpha=1.0)
          (4): Linear(in_features=64, out_features=4, bias=True)
        )"""
    )
    assert net(torch.randn(10, 3)).shape == torch.Size([10, 4])

    cnn = ConvNet(
        num_cells=[32, 64],
        kernel_sizes=[8, 4],
        strides=[2, 1],
        aggregator_class=SquashDims,
    )
    assert _words(repr(cnn)) == _words(
        """ConvNet(
          (0): LazyConv2d(0, 32, kernel_size=(8, 8), stride=(2, 2))
          (1): ELU(alpha=1.0)
          (2): Conv2d(32, 64, kernel_size=(4, 4), stride=(1, 1))
          (3): ELU(alpha=1.0)
          (4): SquashDims()
        )"""
    )
    assert cnn(torch.randn(10, 3, 32, 32)).shape == torch.Size([10, 6400])  # squashed


def test_tutorial_sequence_with_mlp_value_and_ensembling():
    # 003 l.381-452 with the MLP value head of l.389-390, the functional call of
    # l.453-524 and the vmap ensembling of l.524-534 (its code is elided in the seed: the
    # params expanded to 4 copies, then torch.vmap over them, as in TorchRL's tutorial).
    from rl.modules import MLP

    backbone_module = nn.Linear(5, 3)
    backbone = TensorDictModule(backbone_module, in_keys=["observation"], out_keys=["hidden"])
    actor_module = nn.Linear(3, 4)
    actor = TensorDictModule(actor_module, in_keys=["hidden"], out_keys=["action"])
    value_module = MLP(out_features=1, num_cells=[4, 5])
    value = TensorDictModule(value_module, in_keys=["hidden", "action"], out_keys=["value"])
    sequence = TensorDictSequential(backbone, actor, value)
    assert sequence.in_keys == ["observation"]
    assert sequence.out_keys == ["hidden", "action", "value"]

    tensordict = TensorDict({"observation": torch.randn(3, 5)}, [3])
    backbone(tensordict)
    actor(tensordict)
    value(tensordict)
    keys = {"action", "hidden", "observation", "value"}
    assert set(tensordict.keys()) == keys
    assert tensordict["value"].shape == (3, 1)
    expected = value_module(torch.cat([tensordict["hidden"], tensordict["action"]], -1))
    torch.testing.assert_close(tensordict["value"], expected)
    step_by_step = tensordict["value"]
    # the printed repr of the MLP inside the sequence (l.405-412): Tanh by default,
    # in_features 7 = hidden (3) + action (4) once the lazy layer has run
    assert _words(repr(value_module)) == _words(
        """MLP(
            (0): Linear(in_features=7, out_features=4, bias=True)
            (1): Tanh()
            (2): Linear(in_features=4, out_features=5, bias=True)
            (3): Tanh()
            (4): Linear(in_features=5, out_features=1, bias=True)
        )"""
    )

    tensordict = TensorDict({"observation": tensordict["observation"]}, [3])
    sequence(tensordict)
    assert set(tensordict.keys()) == keys
    torch.testing.assert_close(tensordict["value"], step_by_step)

    params = TensorDict.from_module(sequence)
    shapes = {
        ("module", "0", "module", "weight"): (3, 5),
        ("module", "1", "module", "weight"): (4, 3),
        ("module", "2", "module", "0", "weight"): (4, 7),
        ("module", "2", "module", "2", "weight"): (5, 4),
        ("module", "2", "module", "4", "weight"): (1, 5),
        ("module", "2", "module", "4", "bias"): (1,),
    }
    for key, shape in shapes.items():
        assert params[key].shape == shape, key
    assert len(list(params.keys(True, True))) == 10
    with params.to_module(sequence):
        sequence(tensordict)
    torch.testing.assert_close(tensordict["value"], step_by_step)

    # Using vectorized map for model ensembling
    params_expand = params.expand(4).clone()
    params_expand["module", "2", "module", "4", "bias"] += torch.arange(4.0).view(4, 1)

    def exec_sequence(params, data):
        with params.to_module(sequence):
            return sequence(data)

    tensordict_exp = torch.vmap(exec_sequence, (0, None))(params_expand, tensordict)
    assert tensordict_exp.batch_size == torch.Size([4, 3])
    assert set(tensordict_exp.keys()) == keys
    assert tensordict_exp["action"].shape == (4, 3, 4)
    assert tensordict_exp["hidden"].shape == (4, 3, 3)
    assert tensordict_exp["observation"].shape == (4, 3, 5)
    assert tensordict_exp["value"].shape == (4, 3, 1)
    for k in range(4):  # member k = the base network with its last bias moved by k
        torch.testing.assert_close(tensordict_exp["value"][k], step_by_step + k)


def test_tutorial_safe_module_and_actor():
    # 003 l.536-554
    torch.manual_seed(0)
    from rl.core import BoundedTensorSpec
    from rl.modules import SafeModule

    with pytest.warns(DeprecationWarning, match="Bounded"):  # the old name still works
        spec = BoundedTensorSpec(-torch.ones(3), torch.ones(3))
    base_module = nn.Linear(5, 3)
    module = SafeModule(
        module=base_module, spec=spec, in_keys=["obs"], out_keys=["action"], safe=True
    )
    tensordict = TensorDict({"obs": torch.randn(5)}, batch_size=[])
    action = module(tensordict)["action"]
    # the tutorial's printed values (same seed, same init order)
    torch.testing.assert_close(action, torch.tensor([-0.0137, 0.1524, -0.0641]), atol=1e-4, rtol=0)
    tensordict = TensorDict({"obs": torch.randn(5) * 100}, batch_size=[])
    action = module(tensordict)["action"]  # safe=True projects the result within the set
    raw = base_module(tensordict["obs"])
    assert (raw.abs() > 1).all()
    torch.testing.assert_close(action, raw.sign().detach())
    assert action.requires_grad

    from rl.modules import Actor

    base_module = nn.Linear(5, 3)
    actor = Actor(base_module, in_keys=["obs"])
    tensordict = TensorDict({"obs": torch.randn(5)}, batch_size=[])
    actor(tensordict)  # action is the default value
    assert set(tensordict.keys()) == {"obs", "action"}
    torch.testing.assert_close(tensordict["action"], base_module(tensordict["obs"]))


def test_tutorial_tanh_normal():
    # 003 l.555-629
    from tensordict.nn import (
        ProbabilisticTensorDictModule,
        ProbabilisticTensorDictSequential,
    )

    # Probabilistic modules
    from rl.modules import NormalParamExtractor, TanhNormal

    td = TensorDict({"input": torch.randn(3, 5)}, [3])
    net = nn.Sequential(
        nn.Linear(5, 4), NormalParamExtractor()
    )  # splits the output in loc and scale
    module = TensorDictModule(net, in_keys=["input"], out_keys=["loc", "scale"])
    td_module = ProbabilisticTensorDictSequential(
        module,
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=TanhNormal,
            return_log_prob=False,
        ),
    )
    td_module(td)
    assert set(td.keys()) == {"action", "input", "loc", "scale"}
    for key in ("action", "loc", "scale"):
        assert td[key].shape == (3, 2), key
    assert (td["scale"] > 0).all() and (td["action"].abs() < 1).all()

    # returning the log-probability; the tutorial's key "sample_log_prob" is
    # tensordict's old default name: tensordict 0.15 (and TorchRL 0.14) write
    # "<action>_log_prob"
    td = TensorDict({"input": torch.randn(3, 5)}, [3])
    td_module = ProbabilisticTensorDictSequential(
        module,
        ProbabilisticTensorDictModule(
            in_keys=["loc", "scale"],
            out_keys=["action"],
            distribution_class=TanhNormal,
            return_log_prob=True,
        ),
    )
    td_module(td)
    assert set(td.keys()) == {"action", "input", "loc", "action_log_prob", "scale"}
    assert td["action_log_prob"].shape == (3,)
    dist = TanhNormal(td["loc"], td["scale"])
    torch.testing.assert_close(td["action_log_prob"], dist.log_prob(td["action"]))

    # Sampling vs mode / mean
    from rl.envs.utils import ExplorationType, set_exploration_type

    td = TensorDict({"input": torch.randn(3, 5)}, [3])
    torch.manual_seed(0)
    with set_exploration_type(ExplorationType.RANDOM):
        td_module(td)
        random = td["action"]
    with set_exploration_type(ExplorationType.MODE):
        td_module(td)
        mode = td["action"]
    with set_exploration_type(ExplorationType.MODE):
        td_module(td)
        mean = td["action"]
    dist = TanhNormal(td["loc"], td["scale"])
    torch.testing.assert_close(mode, dist.mode)
    torch.testing.assert_close(mean, mode)  # the tutorial prints MODE twice: same values
    assert not torch.allclose(random, mode)
    assert random.shape == mode.shape == (3, 2)
    assert (random.abs() < 1).all() and (mode.abs() < 1).all()


def test_readme_actor_value_operator():
    # 000 l.150-172 / 002 l.425-470. NormalParamsWrapper is gone from TorchRL 0.14 (removed
    # after its deprecation); its docs now end the network with NormalParamExtractor,
    # which is what runs here. 002's MLP(activation=nn.ELU) is activation_class in
    # TorchRL 0.14 too (activation= is a TypeError there). The seed hands the value MLP
    # to ActorValueOperator bare; TorchRL 0.14 needs a module with in_keys there (a bare
    # MLP raises AttributeError), so it is wrapped in a ValueOperator reading "hidden".
    from rl.modules import (
        MLP,
        ActorValueOperator,
        ConvNet,
        NormalParamExtractor,
        SafeModule,
        SafeProbabilisticModule,
        SafeProbabilisticTensorDictSequential,
        TanhNormal,
        ValueOperator,
    )

    # create an nn.Module
    common_module = ConvNet(
        bias_last_layer=True,
        depth=None,
        num_cells=[32, 64, 64],
        kernel_sizes=[8, 4, 3],
        strides=[4, 2, 1],
    )
    # Wrap it in a SafeModule, indicating what key to read in and where to
    # write out the output
    common_module = SafeModule(
        common_module,
        in_keys=["pixels"],
        out_keys=["hidden"],
    )
    # the policy's output is split in loc and scale, and scale is mapped onto a
    # positive space
    policy_module = SafeModule(
        nn.Sequential(
            MLP(num_cells=[64, 64], out_features=32, activation_class=nn.ELU),
            NormalParamExtractor(),
        ),
        in_keys=["hidden"],
        out_keys=["loc", "scale"],
    )
    # Use a SafeProbabilisticTensorDictSequential to combine the SafeModule with a
    # SafeProbabilisticModule, indicating how to build the
    # torch.distribution.Distribution object and what to do with it
    policy_module = SafeProbabilisticTensorDictSequential(  # stochastic policy
        policy_module,
        SafeProbabilisticModule(
            in_keys=["loc", "scale"],
            out_keys="action",
            distribution_class=TanhNormal,
        ),
    )
    value_module = MLP(
        num_cells=[64, 64],
        out_features=1,
        activation_class=nn.ELU,
    )
    value_module = ValueOperator(value_module, in_keys=["hidden"])
    # Wrap the policy and value funciton in a common module
    actor_value = ActorValueOperator(common_module, policy_module, value_module)
    # standalone policy from this
    standalone_policy = actor_value.get_policy_operator()

    # 36x36 pixels -> 8x8 -> 3x3 -> 1x1 x 64 channels, squashed: hidden has 64 features
    td = TensorDict({"pixels": torch.rand(4, 3, 36, 36)}, [4])
    actor_value(td)
    assert set(td.keys()) == {"pixels", "hidden", "loc", "scale", "action", "state_value"}
    assert td["hidden"].shape == (4, 64)
    assert td["loc"].shape == td["scale"].shape == td["action"].shape == (4, 16)
    assert td["state_value"].shape == (4, 1) and (td["scale"] > 0).all()
    assert (td["action"].abs() < 1).all()

    out = standalone_policy(TensorDict({"pixels": td["pixels"]}, [4]))
    assert "state_value" not in out.keys() and out["action"].shape == (4, 16)
    torch.testing.assert_close(out["hidden"], td["hidden"])
    torch.testing.assert_close(out["loc"], td["loc"])
    # the standalone policy shares the trunk's weights
    shared = {id(p) for p in standalone_policy.parameters()}
    assert all(id(p) in shared for p in common_module.parameters())


# ------------------------------------------------------------------ exploration and losses


def _qvalue_actor(n_obs: int = 3, n_actions: int = 4):
    """The smallest ``policy`` / ``value_network`` the README's snippets assume."""
    from rl.core import OneHot
    from rl.modules import QValueActor

    return QValueActor(nn.Linear(n_obs, n_actions), in_keys=["observation"], spec=OneHot(n_actions))


def test_readme_egreedy_wrapper():
    # 002 l.478-484 (000 l.176-180 writes set_exploration_mode("random") / ("mode"), the
    # names TorchRL later replaced by set_exploration_type and ExplorationType).
    from rl.envs.utils import ExplorationType, set_exploration_type
    from rl.modules import EGreedyWrapper

    torch.manual_seed(0)
    policy = _qvalue_actor()
    obs = torch.randn(1000, 3)
    greedy = policy(TensorDict({"observation": obs}, [1000]))["action"]

    policy_explore = EGreedyWrapper(policy)
    tensordict = TensorDict({"observation": obs}, [1000])
    with set_exploration_type(ExplorationType.RANDOM):
        tensordict = policy_explore(tensordict)  # will use eps-greedy
    explored = tensordict["action"]
    assert explored.shape == (1000, 4) and (explored.sum(-1) == 1).all()
    # eps starts at 1: uniform actions, the greedy one about a quarter of the time
    agree = (explored == greedy).all(-1).float().mean()
    assert 0.15 < agree < 0.35
    tensordict = TensorDict({"observation": obs}, [1000])
    with set_exploration_type(ExplorationType.DETERMINISTIC):
        tensordict = policy_explore(tensordict)  # will not use eps-greedy
    assert (tensordict["action"] == greedy).all()


def test_readme_dqn_loss():
    # 000 l.184-190 / 002 l.496-501; value_network, replay_buffer and batch_size are
    # the snippet's assumed objects.
    from rl.data import LazyTensorStorage, TensorDictReplayBuffer

    torch.manual_seed(0)
    value_network = _qvalue_actor()
    n = 32
    replay_buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(n))
    replay_buffer.extend(
        TensorDict(
            {
                "observation": torch.randn(n, 3),
                "action": torch.nn.functional.one_hot(torch.randint(4, (n,)), 4),
                "next": {
                    "observation": torch.randn(n, 3),
                    "reward": torch.randn(n, 1),
                    "done": (done := torch.rand(n, 1) < 0.2),
                    "terminated": done.clone(),
                },
            },
            [n],
        )
    )
    batch_size = 8

    from rl.objectives import DQNLoss

    loss_module = DQNLoss(value_network=value_network, gamma=0.99)
    tensordict = replay_buffer.sample(batch_size)
    loss = loss_module(tensordict)
    assert tensordict.batch_size == (batch_size,)
    # one-step TD target from the (initially identical) target network, squared error
    net = value_network.module[0].module
    with torch.no_grad():
        q_next = net(tensordict["next", "observation"]).max(-1).values
        not_term = (~tensordict["next", "terminated"]).squeeze(-1).float()
        target = tensordict["next", "reward"].squeeze(-1) + 0.99 * not_term * q_next
    pred = (net(tensordict["observation"]) * tensordict["action"]).sum(-1)
    torch.testing.assert_close(loss["loss"], ((pred - target) ** 2).mean())
    loss["loss"].backward()
    assert net.weight.grad is not None and net.weight.grad.abs().sum() > 0


def test_readme_vec_td_lambda_return_estimate():
    # 002 l.504-506 (with terminated); 000 l.192-194 omits it (terminated = done)
    from rl.objectives.value.functional import vec_td_lambda_return_estimate

    torch.manual_seed(0)
    gamma, lmbda = 0.99, 0.9
    B, T = 2, 7
    next_state_value = torch.randn(B, T, 1)
    reward = torch.randn(B, T, 1)
    done = torch.zeros(B, T, 1, dtype=torch.bool)
    done[0, 3] = True  # an episode ends inside the first trajectory
    done[:, -1] = True
    terminated = torch.zeros_like(done)
    terminated[0, 3] = True  # a terminal state; the last steps are truncations
    advantage = vec_td_lambda_return_estimate(
        gamma, lmbda, next_state_value, reward, done, terminated
    )

    def plain(done, terminated):  # the TD(lambda) return, one step at a time
        out = torch.zeros(B, T, 1)
        for b in range(B):
            g = None
            for t in reversed(range(T)):
                v = next_state_value[b, t]
                not_term = 1.0 - terminated[b, t].float()
                if done[b, t]:
                    g = reward[b, t] + gamma * not_term * v
                else:
                    g = reward[b, t] + gamma * not_term * ((1 - lmbda) * v + lmbda * g)
                out[b, t] = g
        return out

    assert advantage.shape == (B, T, 1)
    torch.testing.assert_close(advantage, plain(done, terminated))
    advantage = vec_td_lambda_return_estimate(gamma, lmbda, next_state_value, reward, done)
    torch.testing.assert_close(advantage, plain(done, done))


def test_tutorial_ddpg_loss():
    # 003 l.822-877
    # TorchRL delivers meta-RL compatible loss functions
    # Disclaimer: This APi may change in the future
    from rl.objectives import DDPGLoss

    actor_module = nn.Linear(3, 1)
    actor = TensorDictModule(actor_module, in_keys=["observation"], out_keys=["action"])

    class ConcatModule(nn.Linear):
        def forward(self, obs, action):
            return super().forward(torch.cat([obs, action], -1))

    value_module = ConcatModule(4, 1)
    value = TensorDictModule(
        value_module, in_keys=["observation", "action"], out_keys=["state_action_value"]
    )
    loss_fn = DDPGLoss(actor, value)
    loss_fn.make_value_estimator(loss_fn.default_value_estimator, gamma=0.99)
    tensordict = TensorDict(
        {
            "observation": torch.randn(10, 3),
            "next": {
                "observation": torch.randn(10, 3),
                "reward": torch.randn(10, 1),
                "done": torch.zeros(10, 1, dtype=torch.bool),
            },
            "action": torch.randn(10, 1),
        },
        batch_size=[10],
        device="cpu",
    )
    loss_td = loss_fn(tensordict)
    assert set(loss_td.keys()) == {
        "loss_actor",
        "loss_value",
        "pred_value",
        "pred_value_max",
        "target_value",
        "target_value_max",
        "td_error",
    }
    assert loss_td.batch_size == torch.Size([])
    for key in ("loss_actor", "loss_value", "pred_value_max", "target_value_max"):
        assert loss_td[key].shape == torch.Size([]), key
    for key in ("pred_value", "target_value", "td_error"):
        assert loss_td[key].shape == torch.Size([10]), key
    # the values: the target networks start equal to the trained ones
    obs, next_obs = tensordict["observation"], tensordict["next", "observation"]
    with torch.no_grad():
        target = tensordict["next", "reward"].squeeze(-1) + 0.99 * value_module(
            next_obs, actor_module(next_obs)
        ).squeeze(-1)
        pred = value_module(obs, tensordict["action"]).squeeze(-1)
        loss_actor = -value_module(obs, actor_module(obs)).mean()
    torch.testing.assert_close(loss_td["target_value"], target)
    torch.testing.assert_close(loss_td["pred_value"], pred)
    torch.testing.assert_close(loss_td["loss_value"], ((pred - target) ** 2).mean())
    torch.testing.assert_close(loss_td["loss_actor"], loss_actor)
    # the squared TD error, as TorchRL writes it (the priority of a prioritized buffer)
    torch.testing.assert_close(loss_td["td_error"], (pred - target) ** 2)
    torch.testing.assert_close(loss_td["pred_value_max"], pred.max())
    torch.testing.assert_close(loss_td["target_value_max"], target.max())

    # print(tensordict): the loss wrote td_error into the input (l.865-877)
    assert set(tensordict.keys()) == {"action", "next", "observation", "td_error"}
    assert set(tensordict["next"].keys()) == {"done", "observation", "reward"}
    assert tensordict["td_error"].shape == (10,)
    torch.testing.assert_close(tensordict["td_error"], loss_td["td_error"])


# ------------------------------------------------------------------ collectors and loops


def test_tutorial_multi_collectors():
    # 003 l.717-817, as written. The tutorial's untrained nn.Linear actor writes Pendulum
    # actions outside [-2, 2]: rl's collectors warn and pass them on (gym clips them).
    from rl.collectors import MultiaSyncDataCollector, MultiSyncDataCollector
    from rl.envs import EnvCreator, SerialEnv
    from rl.envs.libs.gym import GymEnv

    parallel_env = SerialEnv(
        3,
        EnvCreator(lambda: GymEnv("Pendulum-v1")),
    )
    create_env_fn = [parallel_env, parallel_env]
    actor_module = nn.Linear(3, 1)
    actor = TensorDictModule(actor_module, in_keys=["observation"], out_keys=["action"])

    root = {"action", "collector", "done", "next", "observation", "terminated", "truncated"}
    nxt = {"done", "observation", "reward", "terminated", "truncated"}

    def check(d, batch):
        assert d.batch_size == torch.Size(batch)
        assert set(d.keys()) == root and set(d["next"].keys()) == nxt
        assert d["action"].shape == (*batch, 1) and d["observation"].shape == (*batch, 3)
        assert d["next", "observation"].shape == (*batch, 3)
        assert d["next", "reward"].shape == (*batch, 1)
        assert d["collector", "traj_ids"].shape == batch
        assert d["collector", "traj_ids"].dtype == torch.int64
        assert d["done"].dtype == torch.bool and d["done"].shape == (*batch, 1)
        # the policy's actions, on the observations it saw
        with torch.no_grad():
            torch.testing.assert_close(d["action"], actor_module(d["observation"]))

    # Sync data collector
    devices = ["cpu", "cpu"]
    collector = MultiSyncDataCollector(
        create_env_fn=create_env_fn,  # either a list of functions or a ParallelEnv
        policy=actor,
        total_frames=240,
        max_frames_per_traj=-1,  # envs are terminating, we don't need to stop them early
        frames_per_batch=60,  # we want 60 frames at a time (we have 3 envs per sub-collector)
        device=devices,
    )
    for i, d in enumerate(collector):
        if i == 0:
            check(d, (2, 3, 10))  # trajectories are split in [2 workers x 3 envs x 10 steps]
        collector.update_policy_weights_()  # make sure that our policies have the latest weights if working on multiple devices
    assert i == 3  # 240 frames / 60
    collector.shutdown()
    del collector

    # async data collector: keeps working while you update your model
    collector = MultiaSyncDataCollector(
        create_env_fn=create_env_fn,  # either a list of functions or a ParallelEnv
        policy=actor,
        total_frames=240,
        max_frames_per_traj=-1,  # envs are terminating, we don't need to stop them early
        frames_per_batch=60,  # we want 60 frames at a time (we have 3 envs per sub-collector)
        device=devices,
    )
    for i, d in enumerate(collector):
        if i == 0:
            check(d, (3, 20))  # one worker's batch: [3 envs x 20 steps]
        collector.update_policy_weights_()  # make sure that our policies have the latest weights if working on multiple devices
    assert i == 3
    collector.shutdown()
    del collector
    del create_env_fn
    del parallel_env


def test_readme_multi_async_collector_loop():
    # 000 l.111-116 / 002 l.326-342 on a small budget, with device=["cpu", "cpu"]: the
    # seed's devices=["cuda:0", "cuda:0"] is an old argument name that TorchRL 0.14 no
    # longer has either (it takes device= per worker), and there is no GPU here. policy, loss_module and optim are the snippet's assumed objects: a
    # one-weight policy on the pixels, a loss that moves that weight.
    from rl.collectors import MultiaSyncDataCollector
    from rl.envs.libs.gym import GymEnv

    class PixelPolicy(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.zeros(1))

        def forward(self, pixels):
            return torch.tanh(self.weight * pixels.float().mean((-3, -2, -1)).unsqueeze(-1))

    policy = TensorDictModule(PixelPolicy(), in_keys=["pixels"], out_keys=["action"])

    def loss_module(tensordict):
        return (policy(tensordict.exclude("action"))["action"] - 1).pow(2).mean()

    optim = torch.optim.SGD(policy.parameters(), lr=1.0)

    env_make = lambda: GymEnv("Pendulum-v1", from_pixels=True)  # noqa: E731
    collector = MultiaSyncDataCollector(
        [env_make, env_make],
        policy=policy,
        device=["cpu", "cpu"],
        total_frames=40,
        frames_per_batch=10,
    )
    weights = []
    for i, tensordict_data in enumerate(collector):  # noqa: B007  (as in the seed)
        assert tensordict_data.batch_size == (10,)
        assert tensordict_data["pixels"].shape == (10, 500, 500, 3)
        assert tensordict_data["pixels"].dtype == torch.uint8
        # the actions of the policy's weights at the time the worker acted
        weights.append(policy.module.weight.item())
        loss = loss_module(tensordict_data)
        loss.backward()
        optim.step()
        optim.zero_grad()
        collector.update_policy_weights_()
    collector.shutdown()
    assert i == 3
    assert weights[0] == 0.0 and weights[-1] > 0.0  # the loss moves the weight up


def test_readme_ppo_script():
    # 002 l.94-165 on a tiny budget: frames_per_batch=100, total_frames=200 and 2 epochs
    # (the seed: 1000, 1_000_000 and 10); the rest as written.
    from tensordict.nn.distributions import NormalParamExtractor

    from rl.collectors import SyncDataCollector
    from rl.data.replay_buffers import (
        LazyTensorStorage,
        SamplerWithoutReplacement,
        TensorDictReplayBuffer,
    )
    from rl.envs.libs.gym import GymEnv
    from rl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from rl.objectives import ClipPPOLoss
    from rl.objectives.value import GAE

    torch.manual_seed(0)
    env = GymEnv("Pendulum-v1")
    model = TensorDictModule(
        nn.Sequential(
            nn.Linear(3, 128), nn.Tanh(),
            nn.Linear(128, 128), nn.Tanh(),
            nn.Linear(128, 128), nn.Tanh(),
            nn.Linear(128, 2),
            NormalParamExtractor(),
        ),
        in_keys=["observation"],
        out_keys=["loc", "scale"],
    )  # fmt: skip
    critic = ValueOperator(
        nn.Sequential(
            nn.Linear(3, 128), nn.Tanh(),
            nn.Linear(128, 128), nn.Tanh(),
            nn.Linear(128, 128), nn.Tanh(),
            nn.Linear(128, 1),
        ),
        in_keys=["observation"],
    )  # fmt: skip
    actor = ProbabilisticActor(
        model,
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": -1.0, "high": 1.0},
        return_log_prob=True,
    )
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(1000),
        sampler=SamplerWithoutReplacement(),
        batch_size=50,
    )
    collector = SyncDataCollector(
        env,
        actor,
        frames_per_batch=100,
        total_frames=200,
    )
    loss_fn = ClipPPOLoss(actor, critic)
    adv_fn = GAE(value_network=critic, average_gae=True, gamma=0.99, lmbda=0.95)
    optim = torch.optim.Adam(loss_fn.parameters(), lr=2e-4)
    before = TensorDict.from_module(loss_fn).clone()

    batches = updates = 0
    for data in collector:  # collect data
        batches += 1
        assert data.batch_size == (100,)
        assert data["action"].shape == (100, 1) and (data["action"].abs() <= 1).all()
        assert data["action_log_prob"].shape == (100,)
        for epoch in range(2):  # noqa: B007  (as in the seed)
            adv_fn(data)  # compute advantage
            assert data["advantage"].shape == data["value_target"].shape == (100, 1)
            # average_gae: standardised advantages
            assert abs(data["advantage"].mean().item()) < 1e-5
            buffer.extend(data)
            for sample in buffer:  # consume data
                assert sample.batch_size == (50,)
                loss_vals = loss_fn(sample)
                loss_val = sum(value for key, value in loss_vals.items() if key.startswith("loss"))
                loss_val.backward()
                optim.step()
                optim.zero_grad()
                updates += 1
        avg_reward = data["next", "reward"].mean().item()
        assert -16.3 <= avg_reward <= 0.0  # Pendulum's reward range
    assert batches == 2
    # each epoch extends the 1000-item buffer by 100 and reads all of it 50 at a time:
    # 100, 200 items in the first batch, 300, 400 in the second
    assert updates == 2 + 4 + 6 + 8
    assert {"loss_objective", "loss_critic", "loss_entropy"} <= set(loss_vals.keys())
    after = TensorDict.from_module(loss_fn)
    changed = (before != after).apply(lambda x: x.any(), batch_size=[]).any()
    assert changed  # the optimizer moved the actor and the critic
    collector.shutdown()


def test_readme_off_policy_loop():
    # 000 l.40-49 / 002 l.213-226: the + lines of the diff. The collector, replay buffer,
    # loss and optimizer are the snippet's assumed objects: a DQN on CartPole, the loss
    # returning its scalar "loss" entry.
    from rl.collectors import SyncDataCollector
    from rl.core import OneHot
    from rl.data import LazyTensorStorage, TensorDictReplayBuffer
    from rl.envs.libs.gym import GymEnv
    from rl.modules import QValueActor
    from rl.objectives import DQNLoss

    torch.manual_seed(0)
    env = GymEnv("CartPole-v1")
    env.set_seed(0)
    policy = QValueActor(nn.Linear(4, 2), in_keys=["observation"], spec=OneHot(2))
    collector = SyncDataCollector(env, policy, frames_per_batch=20, total_frames=60)
    replay_buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    dqn_loss = DQNLoss(policy, action_space="one-hot")

    def loss_fn(tensordict):
        return dqn_loss(tensordict)["loss"]

    optim = torch.optim.Adam(dqn_loss.parameters(), lr=1e-2)
    num_optim_steps, batch_size = 2, 3
    weight = policy.module[0].module.weight
    start = weight.detach().clone()

    for i, tensordict in enumerate(collector):  # noqa: B007  (as in the seed)
        replay_buffer.add(tensordict)
        for j in range(num_optim_steps):  # noqa: B007
            tensordict = replay_buffer.sample(batch_size)
            loss = loss_fn(tensordict)
            loss.backward()
            optim.step()
            optim.zero_grad()
        # add() stores the whole batch as one item: a sample is [batch_size, 20]
        assert tensordict.batch_size == (batch_size, 20)
        assert loss.shape == torch.Size([]) and torch.isfinite(loss)
    assert i == 2 and len(replay_buffer) == 3
    assert not torch.equal(weight.detach(), start)
    collector.shutdown()

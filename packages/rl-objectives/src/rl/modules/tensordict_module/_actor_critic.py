"""Actor-critic containers: a shared trunk with two heads, or two separate networks."""

from __future__ import annotations

import torch
from tensordict.nn import TensorDictModule, TensorDictModuleBase, TensorDictSequential
from torch import nn

from ._probabilistic import SafeProbabilisticModule, SafeProbabilisticTensorDictSequential
from ._sequence import SafeSequential

__all__ = [
    "ActorValueOperator",
    "ActorCriticOperator",
    "ActorCriticWrapper",
    "LMHeadActorValueOperator",
]


class ActorValueOperator(SafeSequential):
    """A shared trunk (``common_operator``) followed by a policy head and a value head.

    Calling it runs the trunk and both heads. ``get_policy_operator()`` and
    ``get_value_operator()`` return the trunk followed by one head; they share the
    parameters of this module, so training one trains the other.

    Args:
        common_operator: the trunk (e.g. a convolutional encoder writing ``"hidden"``).
        policy_operator: the policy head, reading the trunk's outputs.
        value_operator: the value head, reading the trunk's outputs.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.modules import ActorValueOperator, ProbabilisticActor, ValueOperator
        >>> trunk = TensorDictModule(torch.nn.Linear(4, 8), ["observation"], ["hidden"])
        >>> policy = ProbabilisticActor(
        ...     TensorDictModule(torch.nn.Linear(8, 2), ["hidden"], ["logits"]),
        ...     in_keys=["logits"],
        ...     distribution_class=torch.distributions.Categorical,
        ... )
        >>> value = ValueOperator(torch.nn.Linear(8, 1), in_keys=["hidden"])
        >>> agent = ActorValueOperator(trunk, policy, value)
        >>> td = TensorDict(observation=torch.randn(3, 4), batch_size=[3])
        >>> sorted(agent(td).keys())
        ['action', 'hidden', 'logits', 'observation', 'state_value']
        >>> "state_value" in agent.get_policy_operator()(td.select("observation")).keys()
        False
    """

    def __init__(
        self,
        common_operator: TensorDictModuleBase,
        policy_operator: TensorDictModuleBase,
        value_operator: TensorDictModuleBase,
    ):
        super().__init__(common_operator, policy_operator, value_operator)

    def get_policy_operator(self) -> SafeSequential:
        """The trunk followed by the policy head (probabilistic if the head is)."""
        head = self.module[1]
        if isinstance(head, SafeProbabilisticTensorDictSequential):
            return SafeProbabilisticTensorDictSequential(self.module[0], *head.module)
        return SafeSequential(self.module[0], head)

    def get_value_operator(self) -> SafeSequential:
        """The trunk followed by the value head."""
        return SafeSequential(self.module[0], self.module[2])

    def get_policy_head(self) -> TensorDictModuleBase:
        """The policy head alone."""
        return self.module[1]

    def get_value_head(self) -> TensorDictModuleBase:
        """The value head alone."""
        return self.module[2]


class ActorCriticOperator(ActorValueOperator):
    """Like :class:`ActorValueOperator`, with a state-action critic (``Q(s, a)``) head.

    The critic reads the action the policy head writes, so calling the module runs the
    trunk, then the policy, then the critic. ``get_critic_operator()`` returns the whole
    module; ``get_value_operator()`` raises, since there is no state-value head.

    Args:
        common_operator: the trunk.
        policy_operator: the policy head.
        value_operator: the critic head; it must write ``"state_action_value"`` (or any
            key but ``"state_value"``).

    Raises:
        RuntimeError: if the critic head writes ``"state_value"``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from rl.modules import Actor, ActorCriticOperator, ValueOperator
        >>> class QNet(torch.nn.Module):
        ...     def forward(self, hidden, action):
        ...         return torch.cat([hidden, action], -1).sum(-1, keepdim=True)
        >>> op = ActorCriticOperator(
        ...     TensorDictModule(torch.nn.Linear(4, 8), ["observation"], ["hidden"]),
        ...     Actor(torch.nn.Linear(8, 2), in_keys=["hidden"]),
        ...     ValueOperator(QNet(), in_keys=["hidden", "action"]),
        ... )
        >>> op(TensorDict(observation=torch.randn(3, 4), batch_size=[3]))["state_action_value"].shape
        torch.Size([3, 1])
    """

    def __init__(
        self,
        common_operator: TensorDictModuleBase,
        policy_operator: TensorDictModuleBase,
        value_operator: TensorDictModuleBase,
    ):
        super().__init__(common_operator, policy_operator, value_operator)
        if self.module[2].out_keys[0] == "state_value":
            raise RuntimeError(
                "the critic head of ActorCriticOperator writes 'state_value'; it computes the "
                "value of a state-action pair, so write 'state_action_value' (and read "
                "'action'), or use ActorValueOperator for a state-value head"
            )

    def get_critic_operator(self) -> ActorCriticOperator:
        """The whole module (trunk, policy, critic)."""
        return self

    def get_value_operator(self) -> SafeSequential:
        raise RuntimeError(
            "ActorCriticOperator has a state-action critic, not a state-value head: call "
            "get_critic_operator()"
        )


class ActorCriticWrapper(SafeSequential):
    """A policy and a value network with no shared trunk, run one after the other.

    Args:
        policy_operator: the policy.
        value_operator: the critic.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl.modules import Actor, ActorCriticWrapper, ValueOperator
        >>> ac = ActorCriticWrapper(
        ...     Actor(torch.nn.Linear(4, 2)), ValueOperator(torch.nn.Linear(4, 1))
        ... )
        >>> sorted(ac(TensorDict(observation=torch.randn(3, 4), batch_size=[3])).keys())
        ['action', 'observation', 'state_value']
    """

    def __init__(self, policy_operator: TensorDictModuleBase, value_operator: TensorDictModuleBase):
        super().__init__(policy_operator, value_operator)

    def get_policy_operator(self) -> TensorDictModuleBase:
        """The policy."""
        return self.module[0]

    def get_value_operator(self) -> TensorDictModuleBase:
        """The critic."""
        return self.module[1]

    get_policy_head = get_policy_operator
    get_value_head = get_value_operator


class _LastToken(nn.Module):
    """``[B, T, D] -> [B, D]``: the hidden state of the last token."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden[..., -1, :]


class LMHeadActorValueOperator(ActorValueOperator):
    """An :class:`ActorValueOperator` made of a Hugging Face ``*LMHeadModel``.

    The model's ``transformer`` is the trunk: it reads ``"input_ids"`` and
    ``"attention_mask"`` ``[B, T]`` and writes the hidden state of the last token at
    ``"x"`` ``[B, D]`` (called with ``return_dict=False, use_cache=False``, so both kinds
    of config work and no cache is kept). Its ``lm_head`` is the policy head: the next
    token's ``"logits"`` ``[B, V]``, a categorical ``"action"`` and its
    ``"action_log_prob"``. A new bias-free linear layer reads ``"x"`` and writes
    ``"state_value"`` ``[B, 1]``.

    Args:
        base_model: a model with a ``transformer`` and a linear ``lm_head`` (e.g.
            ``transformers.GPT2LMHeadModel``).

    Raises:
        TypeError: ``base_model`` has no ``transformer`` or no linear ``lm_head``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> config = GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=11, n_positions=8)
        >>> agent = LMHeadActorValueOperator(GPT2LMHeadModel(config))
        >>> td = TensorDict(input_ids=torch.randint(11, (4, 3)),
        ...                 attention_mask=torch.ones(4, 3), batch_size=[4])
        >>> out = agent(td)
        >>> out["logits"].shape, out["action"].shape, out["state_value"].shape
        (torch.Size([4, 11]), torch.Size([4]), torch.Size([4, 1]))
    """

    def __init__(self, base_model: nn.Module):
        lm_head = getattr(base_model, "lm_head", None)
        transformer = getattr(base_model, "transformer", None)
        if not isinstance(lm_head, nn.Linear) or not isinstance(transformer, nn.Module):
            raise TypeError(
                "LMHeadActorValueOperator needs a model with a `transformer` module and a "
                f"linear `lm_head`, got {type(base_model).__name__} with "
                f"transformer={type(transformer).__name__}, lm_head={type(lm_head).__name__}"
            )
        common = TensorDictSequential(
            TensorDictModule(
                transformer,
                in_keys={"input_ids": "input_ids", "attention_mask": "attention_mask"},
                out_keys=["x"],
                method_kwargs={"return_dict": False, "use_cache": False},
            ),
            TensorDictModule(_LastToken(), in_keys=["x"], out_keys=["x"]),
        )
        policy = SafeProbabilisticTensorDictSequential(
            TensorDictModule(lm_head, in_keys=["x"], out_keys=["logits"]),
            SafeProbabilisticModule(
                in_keys=["logits"],
                out_keys=["action"],
                distribution_class=torch.distributions.Categorical,
                return_log_prob=True,
            ),
        )
        value = TensorDictModule(
            nn.Linear(lm_head.in_features, 1, bias=False),
            in_keys=["x"],
            out_keys=["state_value"],
        )
        super().__init__(common, policy, value)

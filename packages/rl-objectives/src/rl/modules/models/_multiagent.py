"""Multi-agent networks: per-agent MLP / ConvNet evaluated with torch.vmap."""

from __future__ import annotations

import copy
import textwrap
from collections.abc import Sequence
from copy import deepcopy as _deepcopy

import torch
from tensordict import TensorDict
from torch import nn

from ._conv import ConvNet
from ._mlp import MLP

__all__ = ["MultiAgentConvNet", "MultiAgentMLP", "MultiAgentNetBase"]


class MultiAgentNetBase(nn.Module):
    """Base of the multi-agent networks: the agents' parameters stacked in one TensorDict.

    A subclass builds one agent's network in ``_build_single_net(**kwargs)`` (it receives
    the keyword arguments the base was not given by name, ``device`` included) and checks
    or reshapes the input in ``_pre_forward_check(inputs)``; the base stacks the agents'
    parameters and calls the network once for all of them.

    ``share_params=False``: one network per agent, parameters stacked along a leading
    agent dimension and the template evaluated with ``torch.vmap`` over them.
    ``share_params=True``: one network applied to every agent. ``centralized=True``: each
    network sees the inputs of all agents (flattened). The agent dimension of the output
    sits where it was in the input (``agent_dim``).

    ``use_td_params=True`` (TorchRL's default): the parameters are held by ``self.params``,
    a :class:`~tensordict.nn.TensorDictParams` (``state_dict`` keys ``params.*``), and the
    template net is parameter-free. ``use_td_params=False``: the template net is a
    submodule ``_empty_net`` holding the (stacked) parameters (``state_dict`` keys
    ``_empty_net.*``) and ``self.params`` is a plain TensorDict of those same tensors. The
    two compute the same function from the same seed, but their state dicts do not mix.

    Examples:
        >>> import torch
        >>> from torch import nn
        >>> from rl.modules import MultiAgentNetBase
        >>> class PerAgentLinear(MultiAgentNetBase):
        ...     def __init__(self, n_agents, share_params):
        ...         super().__init__(n_agents=n_agents, centralized=False,
        ...                          share_params=share_params, agent_dim=-2)
        ...     def _build_single_net(self, **kwargs):
        ...         return nn.Linear(4, 2)
        ...     def _pre_forward_check(self, inputs):
        ...         return inputs
        >>> PerAgentLinear(3, share_params=False)(torch.randn(5, 3, 4)).shape
        torch.Size([5, 3, 2])
    """

    agent_dim: int

    def __init__(
        self,
        *,
        n_agents: int,
        centralized: bool | None = None,
        share_params: bool | None = None,
        agent_dim: int | None = None,
        vmap_randomness: str = "different",
        use_td_params: bool = True,
        **net_kwargs,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        # TorchRL still reads the British spelling
        centralized = net_kwargs.pop("centralised", centralized)
        if centralized is None:
            raise TypeError(f"{name} needs centralized=True or False")
        if share_params is None:
            raise TypeError(f"{name} needs share_params=True or False")
        if agent_dim is None:
            raise TypeError(f"{name} needs agent_dim (the dim of the agents in the input)")
        if n_agents < 1:
            raise ValueError(f"{name} needs n_agents >= 1, got {n_agents}")
        self.n_agents = n_agents
        self.centralized = centralized
        self.share_params = share_params
        self.agent_dim = agent_dim
        self.use_td_params = bool(use_td_params)
        self._vmap_randomness = vmap_randomness
        nets = [
            self._build_single_net(**net_kwargs) for _ in range(1 if share_params else n_agents)
        ]
        # lazy layers (no input size given) are stacked uninitialized: they take their
        # shapes at the first call, each agent drawing its own weights (see vmap_randomness)
        self.initialized = not any(
            isinstance(p, nn.parameter.UninitializedParameter) for p in nets[0].parameters()
        )
        as_module = self.use_td_params
        if share_params:
            params = TensorDict.from_module(nets[0], as_module=as_module)
        else:
            params = TensorDict.from_modules(*nets, as_module=as_module)
        template = copy.deepcopy(nets[0])
        TensorDict.from_module(template).data.to("meta").to_module(
            template, preserve_module_state=False
        )
        if as_module:
            self.params = params
            # the template is a submodule (as in TorchRL: ``modules()`` lists its layers)
            # whose weights are plain meta tensors, not parameters or buffers: state_dict,
            # .to() and parameters() only see self.params
            self._empty_net = template
        else:
            # the template holds the parameters, as a submodule; self.params (a plain
            # TensorDict, not registered) refers to the same tensors
            params.to_module(template, preserve_module_state=False)
            self._empty_net = template
            self._bind_params()
        # the layers of a plain MLP template, for the traced forward (None: lazy layers,
        # other layers, or a template that holds the shared parameters: called as it is)
        self._linear_layers = self._traced_plan()

    @property
    def vmap_randomness(self) -> str:
        """The ``randomness`` of the per-agent ``vmap``: ``"same"`` until lazy layers took
        their shapes (their initialisation draws in place, which ``vmap`` only allows with
        ``"same"``; the stacked parameters still differ per agent)."""
        return self._vmap_randomness if self.initialized else "same"

    def _bind_params(self) -> None:
        """``use_td_params=False``: ``self.params`` from the tensors of ``_empty_net``."""
        params = TensorDict.from_module(self._empty_net)
        if not self.share_params:
            params.batch_size = [self.n_agents]
        self.__dict__["params"] = params

    def __setstate__(self, state) -> None:
        super().__setstate__(state)
        if not self.__dict__.get("use_td_params", True):
            self._bind_params()  # a copy's params must be its own net's (deepcopy, pickle)
        if "_linear_layers" not in self.__dict__:  # pickled before the traced forward
            known = "use_td_params" in self.__dict__
            self._linear_layers = self._traced_plan() if known else None

    def _build_single_net(self, **kwargs) -> nn.Module:
        raise NotImplementedError

    def _pre_forward_check(self, inputs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        """Maps the agents' inputs to their outputs, the agent dimension kept in place."""
        inputs = torch.cat(inputs, -1) if len(inputs) > 1 else inputs[0]
        agent_dim = self.agent_dim + inputs.ndim if self.agent_dim < 0 else self.agent_dim
        before_features = agent_dim == inputs.ndim - 2
        inputs = self._pre_forward_check(inputs)
        net = self._empty_net
        if self._linear_layers is not None and before_features and torch.compiler.is_compiling():
            # traced: a function of the parameters' tensors that writes no module
            # attribute (to_module's swaps leave guards on the template's weights that
            # fail at the next call); eager calls, and an agent dimension elsewhere than
            # just before the features, keep the paths below
            return self._linear_forward(self._linear_layers, inputs, agent_dim)
        if not self.share_params:
            output = self.vmap_func_module(
                net,
                in_dims=(0, None if self.centralized else agent_dim),
                out_dims=(agent_dim,),
                randomness=self.vmap_randomness,
            )(self.params, inputs)
        else:
            if not self.use_td_params:
                output = net(inputs)  # the template holds the parameters itself
            elif self.initialized and not torch.compiler.is_compiling():
                output = _call_bound(net, self.params, inputs)
            else:  # lazy layers take their shapes in place; compile traces to_module
                with self.params.to_module(net, preserve_module_state=False):
                    output = net(inputs)
            if self.centralized:
                output = self._expand_agents(output, agent_dim)
        if not self.initialized:  # lazy layers took their shapes
            self.initialized = True
            self._linear_layers = self._traced_plan()
        return output

    def _traced_plan(self) -> list[tuple[str | None, nn.Module]] | None:
        if not self.initialized or (self.share_params and not self.use_td_params):
            return None
        return _linear_plan(self._empty_net)

    def _linear_forward(self, layers, inputs: torch.Tensor, agent_dim: int) -> torch.Tensor:
        """The network on ``inputs`` layer by layer from ``self.params``: each ``nn.Linear``
        as a (batched, when unshared) matmul, parameter-free layers as they are. Computes
        what :meth:`forward`'s ``vmap`` / bound call does, the agent dimension at
        ``agent_dim`` (the one before the features)."""
        params = self.params
        out = inputs
        per_agent = False  # the agents' dimension is in ``out`` (unshared, centralized)
        for name, module in layers:
            if name is None:
                out = module(out)
                continue
            weight = params.get((name, "weight"))
            bias = params.get((name, "bias"), None)
            if self.share_params:
                out = nn.functional.linear(out, weight, bias)
                continue
            # weight [n_agents, out, in]: each agent's row of ``out`` through its own
            if per_agent or not self.centralized:
                out = torch.einsum("...ai,aoi->...ao", out, weight)
            else:  # every agent reads the same (flattened) inputs
                out = torch.einsum("...i,aoi->...ao", out, weight)
            per_agent = True
            if bias is not None:
                out = out + bias
        if self.share_params and self.centralized:
            out = self._expand_agents(out, agent_dim)
        return out

    def _expand_agents(self, output: torch.Tensor, agent_dim: int) -> torch.Tensor:
        """A shared centralized net's one output, seen by every agent at ``agent_dim``."""
        output = output.unsqueeze(agent_dim)
        shape = list(output.shape)
        shape[agent_dim] = self.n_agents
        return output.expand(shape)

    @staticmethod
    def vmap_func_module(
        module: nn.Module,
        in_dims=0,
        out_dims=0,
        randomness: str = "error",
        *,
        chunk_size: int | None = None,
    ):
        """``module`` as a function of stacked parameters, vectorised with ``torch.vmap``.

        The returned function takes ``(params, *inputs)``: ``params`` a TensorDict whose
        leading dimension indexes the copies of ``module``; ``in_dims``, ``out_dims``,
        ``randomness`` and ``chunk_size`` are :func:`torch.vmap`'s. Under
        :func:`torch.export.export` the parameters go in through
        :func:`torch.func.functional_call` (which export traces) and the mapped dimension
        is moved to ``out_dims`` after the map, so the exported program holds no copy of
        them as constants.
        """
        if torch.compiler.is_exporting():
            return _exportable_vmap(module, in_dims, out_dims, randomness, chunk_size)

        def call(params, *inputs):
            with params.to_module(module, preserve_module_state=False):
                return module(*inputs)

        return torch.vmap(
            call, in_dims=in_dims, out_dims=out_dims, randomness=randomness, chunk_size=chunk_size
        )

    def get_stateful_net(self, copy: bool = True) -> nn.Module:
        """A network holding the parameters (stacked when not shared), e.g. to re-initialize them.

        Args:
            copy: return a copy of the template net (else the template itself) with the
                parameters set in it.
        """
        net = _deepcopy(self._empty_net) if copy else self._empty_net
        self.params.to_module(net, preserve_module_state=False)
        return net

    def from_stateful_net(self, stateful_net: nn.Module) -> None:
        """Copies the parameters of ``stateful_net`` (see :meth:`get_stateful_net`) in place."""
        params = TensorDict.from_module(stateful_net, as_module=True)
        ours = set(self.params.keys(True, True))
        theirs = set(params.keys(True, True))
        if ours != theirs:
            raise KeyError(
                f"{type(self).__name__}.from_stateful_net: keys {sorted(ours - theirs)} "
                f"are missing from the module and {sorted(theirs - ours)} are unexpected"
            )
        self.params.data.update_(params.data)

    def reset_parameters(self) -> None:
        """Re-initialize every agent's parameters in place (each agent drawn on its own).

        Calls ``reset_parameters`` of every submodule of the network that has one, once
        with the shared parameters or once per agent's slice of the stacked ones.
        """
        net = self._empty_net
        slices = [self.params.data] if self.share_params else self.params.data.unbind(0)
        for params in slices:
            with params.to_module(net, preserve_module_state=False):
                for module in net.modules():
                    reset = getattr(module, "reset_parameters", None)
                    if callable(reset):
                        reset()

    def __repr__(self) -> str:
        # TorchRL's layout: the network with its parameters, then the multi-agent settings
        with self.params.to_module(self._empty_net, preserve_module_state=False):
            net = textwrap.indent(repr(self._empty_net), "    ")
        settings = (
            f"n_agents={self.n_agents}",
            f"share_params={self.share_params}",
            f"centralized={self.centralized}",
            f"agent_dim={self.agent_dim}",
        )
        body = ",\n".join([net, *(textwrap.indent(x, "    ") for x in settings)])
        return f"{type(self).__name__}(\n{body})"


def _linear_plan(net: nn.Module) -> list[tuple[str | None, nn.Module]] | None:
    """``[(name, layer)]`` of a template that is a plain sequence of ``nn.Linear`` layers
    (``name``: its key in the parameters) and parameter-free layers (``name`` ``None``);
    ``None`` for any other network (a norm layer, a reshaped output, a ConvNet...)."""
    if type(net) not in (nn.Sequential, MLP) or getattr(net, "_reshape_out", False):
        return None
    plan = []
    for name, layer in net.named_children():
        if type(layer) is nn.Linear:
            plan.append((name, layer))
            continue
        # the template's weights are plain (meta) attributes, not parameters
        tensors = [v for v in vars(layer).values() if isinstance(v, torch.Tensor)]
        if tensors or any(True for _ in layer.parameters()) or any(True for _ in layer.buffers()):
            return None  # a layer with weights or statistics of its own
        plan.append((None, layer))
    return plan


def _call_bound(net: nn.Module, params: TensorDict, inputs: torch.Tensor) -> torch.Tensor:
    """``net(inputs)`` with ``params`` in the template's weight slots for the call.

    Where the template's weights are plain attributes (meta tensors), the shared
    parameters are put in them and the meta tensors back after the call by a few
    attribute writes: what ``params.to_module`` does, without its generic swap machinery
    (a per-call cost the update of a multi-agent loss pays once per network). Any other
    layout (e.g. a lazy layer materialized in place) goes through ``to_module``."""
    slots = []
    for key, value in params.items(True, True):
        key = (key,) if isinstance(key, str) else key  # a root entry's key is a str
        owner = net.get_submodule(".".join(key[:-1]))
        if key[-1] not in owner.__dict__:
            with params.to_module(net, preserve_module_state=False):
                return net(inputs)
        slots.append((owner, key[-1], value))
    bound = []
    try:
        for owner, name, value in slots:
            bound.append((owner, name, owner.__dict__[name]))
            owner.__dict__[name] = value
        return net(inputs)
    finally:
        for owner, name, meta in reversed(bound):
            owner.__dict__[name] = meta


def _exportable_vmap(module: nn.Module, in_dims, out_dims, randomness: str, chunk_size):
    """``MultiAgentNetBase.vmap_func_module`` under ``torch.export``: export traces
    ``functional_call`` but not ``TensorDict.to_module``, and lifts a vmap output moved to
    a nonzero dimension as a constant, so the map writes dimension 0 and moves it after."""
    out_dim = out_dims[0] if isinstance(out_dims, tuple) else out_dims

    def call(params, *inputs):
        return torch.func.functional_call(module, params, inputs)

    def mapped(params, *inputs):
        flat = params.flatten_keys(".").to_dict()
        # the template's weights are plain (meta) attributes, not parameters or buffers:
        # functional_call only swaps registered tensors, so they are emptied for the call
        # and put back after it, by this call itself (calls may nest)
        emptied = []
        try:
            for key in flat:
                path, _, name = key.rpartition(".")
                owner = module.get_submodule(path)
                if name not in owner._parameters and name not in owner._buffers:
                    emptied.append((owner, name, getattr(owner, name)))
                    setattr(owner, name, None)
            out = torch.vmap(
                call, in_dims=in_dims, out_dims=0, randomness=randomness, chunk_size=chunk_size
            )(flat, *inputs)
        finally:
            for owner, name, value in reversed(emptied):
                setattr(owner, name, value)
        return out.movedim(0, out_dim)

    return mapped


class MultiAgentMLP(MultiAgentNetBase):
    """An MLP per agent (or one shared), over inputs ``[*B, n_agents, n_agent_inputs]``.

    The output is ``[*B, n_agents, n_agent_outputs]``. With ``centralized=True`` every
    agent's network reads the inputs of all agents (``n_agents * n_agent_inputs``
    features); with ``share_params=True`` all agents use one network (and, centralized,
    get the same output). Unshared parameters are stacked in ``self.params`` and the
    networks run in one ``torch.vmap`` call, as in TorchRL.

    Args:
        n_agent_inputs (int): input features per agent.
        n_agent_outputs (int): output features per agent.
        n_agents (int): number of agents.

    Keyword Args:
        centralized (bool): each network sees all agents' inputs.
        share_params (bool): one network for all agents.
        device (torch.device, optional): device of the parameters.
        depth (int, optional): hidden layers (see :class:`MLP`).
        num_cells (int or sequence of int, optional): hidden sizes (see :class:`MLP`).
        activation_class (type, optional): defaults to ``nn.Tanh``.
        use_td_params (bool, optional): ``True`` (default) keeps the parameters in
            ``self.params``, a :class:`~tensordict.nn.TensorDictParams`; ``False`` keeps
            them in the template net ``self._empty_net`` (``state_dict`` keys
            ``_empty_net.*``). Both compute the same function; their state dicts differ.
        **kwargs: other :class:`MLP` arguments.

    Raises:
        TypeError: if ``centralized`` or ``share_params`` is not given.
        ValueError: if ``n_agent_inputs`` is ``None`` (lazy layers are not supported), or
            in ``forward`` if the agent dimension does not have ``n_agents`` entries.

    Examples:
        >>> import torch
        >>> from rl.modules import MultiAgentMLP
        >>> net = MultiAgentMLP(
        ...     n_agent_inputs=4, n_agent_outputs=2, n_agents=3,
        ...     centralized=False, share_params=False, depth=1, num_cells=8,
        ... )
        >>> net(torch.zeros(5, 3, 4)).shape
        torch.Size([5, 3, 2])
    """

    def __init__(
        self,
        n_agent_inputs: int | None,
        n_agent_outputs: int,
        n_agents: int,
        *,
        centralized: bool | None = None,
        share_params: bool | None = None,
        device: torch.device | str | None = None,
        depth: int | None = None,
        num_cells: Sequence[int] | int | None = None,
        activation_class: type[nn.Module] = nn.Tanh,
        use_td_params: bool = True,
        **kwargs,
    ) -> None:
        if "centralised" in kwargs:
            centralized = kwargs.pop("centralised")
        self.n_agent_inputs = n_agent_inputs
        self.n_agent_outputs = n_agent_outputs
        self.num_cells = num_cells
        self.depth = depth
        self.activation_class = activation_class
        self._n_agents_for_build = n_agents
        self._centralized_for_build = centralized
        super().__init__(
            n_agents=n_agents,
            centralized=centralized,
            share_params=share_params,
            agent_dim=-2,
            device=device,
            use_td_params=use_td_params,
            **kwargs,
        )

    def _build_single_net(self, *, device=None, **kwargs) -> nn.Module:
        n_in = self.n_agent_inputs  # None: lazy layers, sized at the first call
        if self._centralized_for_build and n_in is not None:
            n_in = n_in * self._n_agents_for_build
        return MLP(
            in_features=n_in,
            out_features=self.n_agent_outputs,
            depth=self.depth,
            num_cells=self.num_cells,
            activation_class=self.activation_class,
            device=device,
            **kwargs,
        )

    def _pre_forward_check(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.ndim < 2 or inputs.shape[-2] != self.n_agents:
            raise ValueError(
                f"MultiAgentMLP expects inputs of shape [*B, n_agents={self.n_agents}, "
                f"{self.n_agent_inputs}], got {tuple(inputs.shape)}"
            )
        if self.centralized:
            inputs = inputs.flatten(-2, -1)
        return inputs


class MultiAgentConvNet(MultiAgentNetBase):
    """A ConvNet per agent (or one shared), over inputs ``[*B, n_agents, C, H, W]``.

    The output is ``[*B, n_agents, F]``. ``centralized`` stacks all agents' channels as
    the input of each network.

    Args:
        n_agents (int): number of agents.
        centralized (bool): each network sees all agents' images.
        share_params (bool): one network for all agents.

    Keyword Args:
        in_features (int): input channels per agent (required: no lazy layers).
        device (torch.device, optional): device of the parameters.
        num_cells (sequence of int, optional): channels per layer (see :class:`ConvNet`).
        kernel_sizes (int or sequence, optional): defaults to ``5``.
        strides (int or sequence, optional): defaults to ``2``.
        paddings (int or sequence, optional): defaults to ``0``.
        activation_class (type, optional): defaults to ``nn.ELU``.
        use_td_params (bool, optional): as in :class:`MultiAgentMLP`.
        **kwargs: other :class:`ConvNet` arguments.

    Examples:
        >>> import torch
        >>> from rl.modules import MultiAgentConvNet
        >>> net = MultiAgentConvNet(
        ...     n_agents=2, centralized=False, share_params=False,
        ...     in_features=3, num_cells=[4], kernel_sizes=3, strides=1,
        ... )
        >>> net(torch.zeros(5, 2, 3, 8, 8)).shape
        torch.Size([5, 2, 144])
    """

    def __init__(
        self,
        n_agents: int,
        centralized: bool | None = None,
        share_params: bool | None = None,
        *,
        in_features: int | None = None,
        device: torch.device | str | None = None,
        num_cells: Sequence[int] | None = None,
        kernel_sizes: Sequence[int | Sequence[int]] | int = 5,
        strides: Sequence[int] | int = 2,
        paddings: Sequence[int] | int = 0,
        activation_class: type[nn.Module] = nn.ELU,
        use_td_params: bool = True,
        **kwargs,
    ) -> None:
        self.in_features = in_features
        self.num_cells = num_cells
        self.kernel_sizes = kernel_sizes
        self.strides = strides
        self.paddings = paddings
        self.activation_class = activation_class
        self._n_agents_for_build = n_agents
        self._centralized_for_build = centralized
        super().__init__(
            n_agents=n_agents,
            centralized=centralized,
            share_params=share_params,
            agent_dim=-4,
            device=device,
            use_td_params=use_td_params,
            **kwargs,
        )

    def _build_single_net(self, *, device=None, **kwargs) -> nn.Module:
        in_features = self.in_features  # None: lazy layers, sized at the first call
        if self._centralized_for_build and in_features is not None:
            in_features = in_features * self._n_agents_for_build
        return ConvNet(
            in_features=in_features,
            num_cells=self.num_cells,
            kernel_sizes=self.kernel_sizes,
            strides=self.strides,
            paddings=self.paddings,
            activation_class=self.activation_class,
            device=device,
            **kwargs,
        )

    def _pre_forward_check(self, inputs: torch.Tensor) -> torch.Tensor:
        if inputs.ndim < 4 or inputs.shape[-4] != self.n_agents:
            raise ValueError(
                f"MultiAgentConvNet expects inputs of shape [*B, n_agents={self.n_agents}, "
                f"C, H, W], got {tuple(inputs.shape)}"
            )
        if self.centralized:
            inputs = inputs.flatten(-4, -3)
        return inputs

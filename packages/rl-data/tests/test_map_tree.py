"""MCTSForest and Tree: tree structure read back from hand-built trajectories."""

import doctest
import weakref

import pytest
import torch
from tensordict import TensorDict, assert_close, lazy_stack

import rl.data.map.tree as tree_module
from rl.data import (
    LazyMemmapStorage,
    LazyStackStorage,
    LazyTensorStorage,
    ListStorage,
    MCTSForest,
    TensorDictMap,
    Tree,
)


def rollout(observations, actions, *, done_last=False):
    """A TED rollout visiting ``observations`` (len T+1) through ``actions`` (len T)."""
    obs = torch.tensor(observations)
    act = torch.tensor(actions)
    steps = len(actions)
    done = torch.zeros(steps, 1, dtype=torch.bool)
    done[-1] = done_last
    return TensorDict(
        observation=obs[:-1],
        action=act,
        next=TensorDict(
            observation=obs[1:],
            reward=act.float().unsqueeze(-1),
            done=done,
            batch_size=[steps],
        ),
        batch_size=[steps],
    )


def root(obs):
    return TensorDict(observation=torch.tensor(obs))


# The forest every structural test reads:
#
#   0 -a1-> 1 -a1-> 2 -a1-> 3          A: the trunk
#                  2 -a2-> 4 -a1-> 5   B: shares 0-1-2 with A, branches at 2
#   0 -a2-> 6                          C: a second action at the root
#                  2 -a3-> 7           D: a third branch at 2
#           1 -a2-> 8                  E: a branch at 1 (its prefix 0-1 is shared)
TRAJECTORIES = [
    ([0, 1, 2, 3], [1, 1, 1]),
    ([0, 1, 2, 4, 5], [1, 1, 2, 1]),
    ([0, 6], [2]),
    ([0, 1, 2, 7], [1, 1, 3]),
    ([0, 1, 8], [1, 2]),
]


def make_forest(trajectories=TRAJECTORIES, **kwargs):
    forest = MCTSForest(**kwargs)
    for observations, actions in trajectories:
        forest.extend(rollout(observations, actions))
    return forest


def next_obs(vertex):
    return vertex.rollout["next", "observation"].tolist()


class TestMCTSForestStructure:
    def test_len_counts_distinct_transitions(self):
        # distinct (obs, action) pairs: 0a1 1a1 2a1 2a2 4a1 0a2 2a3 1a2
        assert len(make_forest()) == 8

    def test_repeated_rollout_adds_nothing(self):
        forest = make_forest()
        before = forest.get_tree(root(0)).edges()
        forest.extend(rollout(*TRAJECTORIES[1]))
        assert len(forest) == 8
        assert forest.get_tree(root(0)).edges() == before

    def test_compact_tree_branches_where_rollouts_diverge(self):
        tree = make_forest().get_tree(root(0))
        assert tree.rollout is None and tree.hash is None and tree.node_id == 0
        assert tree.num_children == 2
        trunk, side = tree.subtree[0], tree.subtree[1]
        # 0 -a1-> 1 (1 branches: a1, a2)
        assert next_obs(trunk) == [1] and trunk.num_children == 2
        assert next_obs(side) == [6] and side.num_children == 0
        # 1 -a1-> 2 (2 branches: a1, a2, a3), 1 -a2-> 8
        at2, leaf8 = trunk.subtree[0], trunk.subtree[1]
        assert next_obs(at2) == [2] and at2.num_children == 3
        assert next_obs(leaf8) == [8]
        # the single-action stretch 4 -a1-> 5 is folded into one vertex
        assert [next_obs(v) for v in at2.subtree.unbind(0)] == [[3], [4, 5], [7]]
        assert at2.subtree[1].rollout["action"].tolist() == [2, 1]

    def test_node_counts_and_paths(self):
        tree = make_forest().get_tree(root(0))
        # root, 1, 6, 2, 8, 3, 5, 7
        assert tree.num_vertices() == 8
        assert len(tree.edges()) == 7
        assert sorted(tree.valid_paths()) == [(0, 0, 0), (0, 0, 1), (0, 0, 2), (0, 1), (1,)]
        assert tree.max_length() == 3
        # breadth-first ids: level 1 = {1, 2}, level 2 = {3, 4}, level 3 = {5, 6, 7}
        assert tree.edges() == [(0, 1), (0, 2), (1, 3), (1, 4), (3, 5), (3, 6), (3, 7)]
        for node_id in range(8):
            assert tree.get_vertex_by_id(node_id).node_id == node_id

    def test_not_compact_has_one_vertex_per_step(self):
        tree = make_forest().get_tree(root(0), compact=False)
        # every distinct next observation is a vertex: 1 2 3 4 5 6 7 8, plus the root
        assert tree.num_vertices() == 9
        assert tree.max_length() == 4  # 0-1-2-4-5
        for vertex in tree.vertices().values():
            if vertex.rollout is not None:
                assert vertex.rollout.shape == (1,)

    def test_rollout_from_path_rebuilds_each_trajectory(self):
        tree = make_forest().get_tree(root(0))
        expected = {(0, 0, 0): 0, (0, 0, 1): 1, (1,): 2, (0, 0, 2): 3, (0, 1): 4}
        for path, which in expected.items():
            rebuilt = tree.rollout_from_path(path)
            assert_close(rebuilt, rollout(*TRAJECTORIES[which]), intersection=True)

    @pytest.mark.parametrize("max_depth, vertices", [(0, 3), (1, 5), (2, 8), (None, 8)])
    def test_max_depth(self, max_depth, vertices):
        # max_depth=0: the root and its children; each level more adds one level of children
        tree = make_forest().get_tree(root(0), max_depth=max_depth)
        assert tree.num_vertices() == vertices

    def test_single_action_root_carries_the_shared_prefix(self):
        forest = make_forest(TRAJECTORIES[:2])
        tree = forest.get_tree(root(0))
        assert next_obs(tree) == [1, 2]
        assert tree.node_data["observation"] == 2
        assert tree.num_children == 2
        # with compact=False the root takes the first step only
        assert next_obs(forest.get_tree(root(0), compact=False)) == [1]

    def test_tree_from_an_inner_observation(self):
        tree = make_forest().get_tree(root(2))
        assert tree.rollout is None and tree.num_children == 3
        assert tree.num_vertices() == 4

    def test_rollouts_meeting_again_share_a_vertex(self):
        # 0 -a1-> 1 -a1-> 2 -a5-> 9 and 0 -a2-> 6 -a1-> 2: vertex "2 -a5-> 9" has two parents
        forest = make_forest([([0, 1, 2, 9], [1, 1, 5]), ([0, 6, 2, 9], [2, 1, 5]), ([2, 10], [6])])
        tree = forest.get_tree(root(0))
        first, second = tree.subtree[0].subtree[0], tree.subtree[1].subtree[0]
        assert first.node_id == second.node_id
        assert len(tree.vertices(key_type="path")) > len(tree.vertices(key_type="id"))
        assert tree.num_vertices() == tree.num_vertices(count_repeat=True)
        parents = first.parent
        assert sorted(parents.node_id) == [1, 2]

    def test_parent_and_actions(self):
        tree = make_forest().get_tree(root(0))
        at2 = tree.subtree[0].subtree[0]
        assert at2.parent.node_id == tree.subtree[0].node_id
        assert tree.parent is None
        assert tree.branching_action is None and tree.prev_action is None
        leaf = at2.subtree[1]
        assert leaf.branching_action.item() == 2 and leaf.prev_action.item() == 1
        assert at2.selected_actions.tolist() == [1, 2, 3]
        assert tree.selected_actions.tolist() == [1, 2]

    def test_is_terminal_and_counts(self):
        forest = MCTSForest()
        forest.extend(rollout([0, 1, 2], [1, 1], done_last=True))
        forest.extend(rollout([0, 3], [2]))
        tree = forest.get_tree(root(0))
        assert tree.is_terminal is False
        assert tree.subtree[0].is_terminal.item() is True
        assert tree.subtree[1].is_terminal.item() is False
        # the node map counts the writes through each observation
        assert forest.node_map[root(0)]["count"].item() == 2
        assert forest.node_map[root(1)]["count"].item() == 1

    def test_to_string(self):
        text = make_forest().to_string(root(0), lambda v: next_obs(v))
        assert text.splitlines() == [
            "(0,) [1]",
            " (0, 0) [2]",
            "  (0, 0, 0) [3]",
            "  (0, 0, 1) [4, 5]",
            "  (0, 0, 2) [7]",
            " (0, 1) [8]",
            "(1,) [6]",
        ]

    def test_batched_rollout_reads_as_transitions(self):
        first, second = rollout([0, 1, 2], [1, 1]), rollout([0, 3, 4], [2, 2])
        forest = MCTSForest()
        forest.extend(torch.stack([first, second]))
        tree = forest.get_tree(root(0))
        assert len(forest) == 4
        assert [next_obs(v) for v in tree.subtree.unbind(0)] == [[1, 2], [3, 4]]

    def test_one_batch_through_a_node_several_times(self):
        # three transitions from 0 in one extend: a1 twice (same outcome), a2 once
        forest = MCTSForest()
        forest.extend(rollout([0, 1], [1]).expand(2).clone().reshape(-1))
        batch = torch.cat([rollout([0, 1], [1]), rollout([0, 2], [2]), rollout([0, 1], [1])])
        forest.extend(batch)
        assert len(forest) == 2
        meta = forest.node_map[root(0)]
        assert meta["count"].item() == 5  # every step that left 0
        assert meta["_index"].tolist() == [0, 1]
        tree = forest.get_tree(root(0))
        assert [next_obs(v) for v in tree.subtree.unbind(0)] == [[1], [2]]

    def test_nested_keys(self):
        data = rollout([0, 1, 2], [1, 1])
        data = TensorDict(
            agent=TensorDict(obs=data["observation"], act=data["action"], batch_size=[2]),
            next=TensorDict(
                agent=TensorDict(obs=data["next", "observation"], batch_size=[2]), batch_size=[2]
            ),
            batch_size=[2],
        )
        forest = MCTSForest(observation_keys=[("agent", "obs")], action_keys=("agent", "act"))
        forest.extend(data)
        tree = forest.get_tree(TensorDict(agent=TensorDict(obs=torch.tensor(0))))
        assert tree.rollout["next", "agent", "obs"].tolist() == [1, 2]

    def test_excluded_keys_are_not_stored(self):
        data = rollout([0, 1], [1])
        data["next", "pixels"] = torch.zeros(1, 3)
        forest = MCTSForest(excluded_keys=["pixels"])
        forest.extend(data)
        assert ("next", "pixels") not in forest.get_tree(root(0)).rollout.keys(True)

    def test_consolidated_storage(self):
        forest = make_forest(consolidated=True)
        assert forest.data_map.storage._storage.is_consolidated()
        tree = forest.get_tree(root(0))
        assert tree.num_vertices() == 8
        assert next_obs(tree.subtree[0].subtree[0].subtree[1]) == [4, 5]

    @pytest.mark.parametrize(
        "storage", [LazyTensorStorage, LazyMemmapStorage, ListStorage, LazyStackStorage]
    )
    def test_data_map_storages(self, storage):
        example = rollout(*TRAJECTORIES[0])
        data_map = TensorDictMap.from_tensordict_pair(
            example.exclude("next"),
            example.select("next", "action"),
            in_keys=["observation", "action"],
            storage_constructor=lambda: storage(50),
        )
        forest = make_forest(data_map=data_map)
        assert forest.max_size == 50
        tree = forest.get_tree(root(0))
        assert tree.num_vertices() == 8
        assert next_obs(tree.subtree[0].subtree[0].subtree[1]) == [4, 5]
        assert tree.rollout_from_path((0, 1))["next", "observation"].tolist() == [1, 8]

    def test_given_storage_size(self):
        forest = make_forest(max_size=20)
        assert forest.data_map.max_size == 20 and forest.max_size == 20

    def test_get_keys_from_env_keeps_given_keys(self):
        class Env:
            reward_keys = ["r"]
            done_keys = ["d"]
            action_keys = ["a"]
            observation_keys = ["o"]

        forest = MCTSForest(action_keys=["act"])
        forest.get_keys_from_env(Env())
        assert forest.action_keys == ["act"]
        assert (forest.reward_keys, forest.done_keys, forest.observation_keys) == (
            ["r"],
            ["d"],
            ["o"],
        )

    def test_default_keys(self):
        forest = MCTSForest()
        assert forest.done_keys == ["done", "terminated", "truncated"]
        assert forest.reward_keys == ["reward"]
        assert forest.action_keys == ["action"]
        assert forest.observation_keys == ["observation"]


class TestMCTSForestErrors:
    def test_unknown_observation_key(self):
        with pytest.raises(KeyError, match="'state'"):
            MCTSForest(observation_keys=["state"]).extend(rollout([0, 1], [1]))

    def test_unknown_action_key(self):
        with pytest.raises(KeyError, match="'move'.*action_keys"):
            MCTSForest(action_keys=["move"]).extend(rollout([0, 1], [1]))

    def test_rollout_without_next(self):
        data = rollout([0, 1], [1]).exclude("next")
        with pytest.raises(KeyError, match="'next'"):
            MCTSForest().extend(data)

    def test_root_never_stored(self):
        with pytest.raises(KeyError, match="no rollout in the forest leaves the root.*observation"):
            make_forest().get_tree(root(42))

    def test_empty_forest(self):
        with pytest.raises(KeyError, match="no rollout in the forest leaves the root"):
            MCTSForest().get_tree(root(0))

    def test_root_without_observation_key(self):
        with pytest.raises(KeyError, match="the root has no entry 'observation'"):
            make_forest().get_tree(TensorDict(obs=torch.tensor(0)))

    def test_not_a_tensordict(self):
        with pytest.raises(TypeError, match="TensorDict rollout"):
            MCTSForest().extend({"observation": torch.zeros(2)})

    def test_bad_key_list(self):
        with pytest.raises(ValueError, match="action_keys must be a list"):
            MCTSForest(action_keys=3)

    def test_conflicting_max_size(self):
        data_map = make_forest(max_size=10).data_map
        with pytest.raises(ValueError, match="Conflicting max_size"):
            MCTSForest(data_map=data_map, max_size=20)

    def test_bad_key_type(self):
        with pytest.raises(ValueError, match="key_type must be"):
            make_forest().get_tree(root(0)).vertices(key_type="name")

    def test_vertex_not_found(self):
        tree = make_forest().get_tree(root(0))
        with pytest.raises(ValueError, match="id 99 not found"):
            tree.get_vertex_by_id(99)
        with pytest.raises(ValueError, match="hash 5 not found"):
            tree.get_vertex_by_hash(5)

    def test_specs_missing(self):
        with pytest.raises(RuntimeError, match="no specs"):
            _ = Tree(node_data=TensorDict()).full_action_spec

    def test_plot_not_provided(self):
        with pytest.raises(NotImplementedError, match="to_string"):
            Tree(node_data=TensorDict()).plot()

    def test_consolidated_tensor_storage(self):
        storage = LazyTensorStorage(4, consolidated=True)
        with pytest.raises(ValueError, match="consolidated=True"):
            storage.set(torch.arange(2), torch.zeros(2, 3))


class TestTree:
    def make(self):
        def stack(values, first_id):
            return lazy_stack(
                [
                    Tree(
                        node_data=TensorDict(obs=torch.tensor(v)),
                        hash=100 + v,
                        node_id=first_id + i,
                    )
                    for i, v in enumerate(values)
                ]
            )

        top = Tree(node_data=TensorDict(obs=torch.tensor(0)), node_id=0)
        top.subtree = stack([1, 2], 1)
        top.subtree[0].subtree = stack([3, 4], 3)
        return top

    def test_structure(self):
        top = self.make()
        assert top.num_vertices() == 5
        assert sorted(top.edges()) == [(0, 1), (0, 2), (1, 3), (1, 4)]
        assert set(top.valid_paths()) == {(0, 0), (0, 1), (1,)}
        assert top.max_length() == 2
        assert set(top.vertices(key_type="path")) == {(), (0,), (1,), (0, 0), (0, 1)}
        assert top.get_vertex_by_hash(104).node_id == 4

    def test_parent_is_weak_and_shares_tensors(self):
        top = self.make()
        child = top.subtree[0].subtree[1]
        assert child.parent.node_data is top.subtree[0].node_data
        assert isinstance(child._parent, weakref.ref)

    def test_contains(self):
        top = self.make()
        assert top.subtree[0].subtree[0] in top
        assert top.subtree[1] not in top.subtree[0]

    def test_make_node(self):
        step = rollout([0, 1], [1])[0]
        node = Tree.make_node(step)
        assert node.rollout.shape == (1,)
        assert node.num_children == 1
        assert node.subtree[0].node_data["observation"] == 1
        assert "action" not in node.node_data.keys()
        assert Tree.make_node(root(5)).rollout is None

    def test_visits_alias(self):
        node = Tree.make_node(root(0))
        node.visits = torch.tensor(3)
        assert node.count == 3

    def test_fully_expanded(self):
        class Env:
            def cardinality(self, data):
                return 2

        top = self.make()
        assert top.fully_expanded(Env())
        assert not top.subtree[1].fully_expanded(Env())


def test_docstring_examples():
    result = doctest.testmod(tree_module, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0

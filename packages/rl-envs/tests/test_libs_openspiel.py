"""OpenSpielEnv / OpenSpielWrapper: specs, values against pyspiel driven directly, masks,
chance nodes and seeding, simultaneous games, state restore, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rl.core import Categorical, OneHot
from rl.envs import MarlGroupMapType, SerialEnv, check_env_specs

pyspiel = pytest.importorskip("pyspiel")

from rl.envs.libs.openspiel import OpenSpielEnv, OpenSpielWrapper  # noqa: E402

pytestmark = pytest.mark.open_spiel


def _first_legal(td, group="agents"):
    """The action of each agent: its first legal action (index)."""
    return td[group, "action_mask"].int().argmax(-1)


def _direct_episode(game_name, seed, max_steps=200):
    """Plays ``game_name`` with pyspiel alone: chance outcomes drawn from
    ``np.random.default_rng(seed)`` as the env does, every player takes its first legal
    action. Returns the per-step observations of player 0, returns and current players."""
    game = pyspiel.load_game(game_name)
    rng = np.random.default_rng(seed)
    state = game.new_initial_state()

    def resolve():
        while state.is_chance_node():
            actions, probs = zip(*state.chance_outcomes())
            state.apply_action(int(rng.choice(list(actions), p=list(probs))))

    resolve()
    obs, players, returns = [list(state.observation_tensor(0))], [state.current_player()], []
    for _ in range(max_steps):
        if state.is_terminal():
            break
        state.apply_action(state.legal_actions(state.current_player())[0])
        resolve()
        obs.append(list(state.observation_tensor(0)))
        players.append(state.current_player())
        returns.append(list(state.returns()))
    return obs, players, returns


class TestOpenSpielSpecs:
    def test_tic_tac_toe_specs(self):
        env = OpenSpielEnv("tic_tac_toe")
        assert env.group_map == {"agents": ["player_0", "player_1"]}
        assert env.observation_spec["agents", "observation"].shape == (2, 3, 3, 3)
        action = env.full_action_spec["agents", "action"]
        assert isinstance(action, OneHot) and action.shape == (2, 9)
        assert env.full_reward_spec["agents", "reward"].shape == (2, 1)
        assert set(env.full_done_spec.keys()) == {"done", "terminated"}
        assert env.observation_spec["current_player"].dtype == torch.int32
        assert "information_state" not in env.observation_spec["agents"].keys()

    def test_categorical_actions_and_information_state(self):
        env = OpenSpielEnv("kuhn_poker", categorical_actions=True)
        action = env.full_action_spec["agents", "action"]
        assert isinstance(action, Categorical) and action.shape == (2,) and action.n == 2
        assert env.observation_spec["agents", "information_state"].shape == (2, 11)
        assert env.observation_spec["agents", "observation"].shape == (2, 7)

    @pytest.mark.parametrize(
        "game", ["tic_tac_toe", "kuhn_poker", "matrix_rps", "backgammon", "2048", "goofspiel"]
    )
    @pytest.mark.parametrize("categorical", [False, True])
    def test_check_env_specs(self, game, categorical):
        env = OpenSpielEnv(game, categorical_actions=categorical)
        check_env_specs(env, seed=0)

    def test_group_maps(self):
        env = OpenSpielEnv("tic_tac_toe", group_map=MarlGroupMapType.ONE_GROUP_PER_AGENT)
        assert env.group_map == {"player_0": ["player_0"], "player_1": ["player_1"]}
        td = env.reset()
        assert td["player_0", "observation"].shape == (1, 3, 3, 3)
        check_env_specs(env, seed=0)
        env = OpenSpielEnv("tic_tac_toe", group_map={"b": ["player_1"], "a": ["player_0"]})
        td = env.reset()
        assert td["a", "action_mask"].all() and not td["b", "action_mask"][0, 1:].any()

    def test_available_envs(self):
        names = OpenSpielWrapper.available_envs
        assert "tic_tac_toe" in names and "backgammon" in names

    def test_return_state_spec(self):
        env = OpenSpielEnv("kuhn_poker", return_state=True)
        check_env_specs(env, seed=0)


class TestOpenSpielValues:
    def test_tic_tac_toe_matches_pyspiel(self):
        moves = [4, 0, 8, 2, 1, 7, 6, 3, 5]  # a draw
        env = OpenSpielEnv("tic_tac_toe", categorical_actions=True)
        state = pyspiel.load_game("tic_tac_toe").new_initial_state()
        td = env.reset()
        for move in moves:
            player = state.current_player()
            assert int(td["current_player"]) == player
            for p in range(2):
                expected = torch.tensor(state.observation_tensor(p)).reshape(3, 3, 3)
                torch.testing.assert_close(td["agents", "observation"][p], expected)
            legal = torch.zeros(9, dtype=torch.bool)
            legal[state.legal_actions(player)] = True
            assert torch.equal(td["agents", "action_mask"][player], legal)
            idle = 1 - player
            assert td["agents", "action_mask"][idle].tolist() == [True] + [False] * 8
            action = torch.zeros(2, dtype=torch.int64)
            action[player] = move
            td["agents", "action"] = action
            td = env.step(td)["next"]
            state.apply_action(move)
            expected_reward = torch.tensor(state.rewards(), dtype=torch.float32).reshape(2, 1)
            torch.testing.assert_close(td["agents", "reward"], expected_reward)
        assert state.is_terminal() and bool(td["done"]) and bool(td["terminated"])
        assert int(td["current_player"]) == int(pyspiel.PlayerId.TERMINAL)
        assert td["agents", "reward"].flatten().tolist() == [0.0, 0.0]

    def test_win_rewards(self):
        env = OpenSpielEnv("tic_tac_toe", categorical_actions=True)
        td = env.reset()
        rewards = []
        for move in [0, 3, 1, 4, 2]:  # player 0 wins on the top row
            action = torch.zeros(2, dtype=torch.int64)
            action[int(td["current_player"])] = move
            td["agents", "action"] = action
            td = env.step(td)["next"]
            rewards.append(td["agents", "reward"].flatten().tolist())
        assert rewards == [[0.0, 0.0]] * 4 + [[1.0, -1.0]]
        assert bool(td["done"])

    @pytest.mark.parametrize("seed", [0, 3])
    def test_chance_game_matches_pyspiel_with_same_seed(self, seed):
        obs, players, returns = _direct_episode("backgammon", seed, max_steps=30)
        env = OpenSpielEnv("backgammon", categorical_actions=True)
        env.set_seed(seed)
        td = env.reset()
        torch.testing.assert_close(td["agents", "observation"][0], torch.tensor(obs[0]))
        total = torch.zeros(2)
        for t in range(len(returns)):
            td["agents", "action"] = _first_legal(td)
            td = env.step(td)["next"]
            assert int(td["current_player"]) == players[t + 1]
            torch.testing.assert_close(td["agents", "observation"][0], torch.tensor(obs[t + 1]))
            total += td["agents", "reward"].flatten()
            torch.testing.assert_close(total, torch.tensor(returns[t], dtype=torch.float32))

    def test_same_seed_same_trajectory(self):
        env = OpenSpielEnv("backgammon")
        torch.manual_seed(0)  # the random actions
        env.set_seed(7)  # the dice
        a = env.rollout(40, break_when_any_done=False)
        torch.manual_seed(0)
        env.set_seed(7)
        b = env.rollout(40, break_when_any_done=False)
        assert torch.equal(a["next", "agents", "observation"], b["next", "agents", "observation"])
        torch.manual_seed(0)
        env.set_seed(8)
        c = env.rollout(40, break_when_any_done=False)
        assert not torch.equal(a["agents", "observation"][0], c["agents", "observation"][0])

    def test_intermediate_rewards_sum_to_returns(self):
        env = OpenSpielEnv("2048", categorical_actions=True)
        env.set_seed(0)
        rollout = env.rollout(60)
        total = rollout["next", "agents", "reward"].sum().item()
        assert total == pytest.approx(env.env.returns()[0])
        assert (rollout["next", "agents", "reward"] >= 0).all()
        assert total > 0

    def test_simultaneous_game(self):
        env = OpenSpielEnv("matrix_rps", categorical_actions=True)
        td = env.reset()
        assert int(td["current_player"]) == int(pyspiel.PlayerId.SIMULTANEOUS)
        assert td["agents", "action_mask"].all()
        td["agents", "action"] = torch.tensor([0, 2])
        out = env.step(td)["next"]
        state = pyspiel.load_game("matrix_rps").new_initial_state()
        state.apply_actions([0, 2])
        expected = torch.tensor(state.returns(), dtype=torch.float32).reshape(2, 1)
        torch.testing.assert_close(out["agents", "reward"], expected)
        assert bool(out["done"])

    def test_random_actions_are_legal(self):
        env = OpenSpielEnv("tic_tac_toe")
        torch.manual_seed(0)
        for _ in range(5):
            rollout = env.rollout(9)
            chosen = rollout["agents", "action"].bool()
            assert (chosen <= rollout["agents", "action_mask"]).all()
            assert bool(rollout["next", "done"][-1])
        # the spec carries the mask too: a draw from it is legal
        td = env.reset()
        td["agents", "action"] = torch.tensor([[0, 0, 0, 0, 1, 0, 0, 0, 0], [1] + [0] * 8])
        td = env.step(td)["next"]
        for _ in range(20):
            draw = env.full_action_spec["agents", "action"].rand().bool()
            assert (draw <= td["agents", "action_mask"]).all() and not draw[1, 4]

    def test_chance_sampler(self):
        calls = []

        def first_outcome(actions, probabilities):
            calls.append(len(actions))
            assert sum(probabilities) == pytest.approx(1.0)
            return actions[0]

        base = pyspiel.load_game("backgammon").new_initial_state()
        env = OpenSpielWrapper(base, chance_sampler=first_outcome)
        td = env.reset()
        assert calls
        state = pyspiel.load_game("backgammon").new_initial_state()
        while state.is_chance_node():
            state.apply_action(state.chance_outcomes()[0][0])
        torch.testing.assert_close(
            td["agents", "observation"][0], torch.tensor(state.observation_tensor(0))
        )

    def test_reset_restores_state(self):
        env = OpenSpielEnv("tic_tac_toe", categorical_actions=True, return_state=True)
        td = env.reset()
        td["agents", "action"] = torch.tensor([4, 0])
        saved = env.step(td)["next"]
        td = saved.clone()
        td["agents", "action"] = torch.tensor([0, 0])
        moved = env.step(td)["next"]
        assert not torch.equal(moved["agents", "observation"], saved["agents", "observation"])
        restored = env.reset(saved.clone())
        assert restored["state"] == saved["state"]
        torch.testing.assert_close(
            restored["agents", "observation"], saved["agents", "observation"]
        )
        assert torch.equal(restored["agents", "action_mask"], saved["agents", "action_mask"])
        assert int(restored["current_player"]) == 1

    def test_serial_env(self):
        env = SerialEnv(2, lambda: OpenSpielEnv("tic_tac_toe", categorical_actions=True))
        rollout = env.rollout(3)
        assert rollout["agents", "observation"].shape == (2, 3, 2, 3, 3, 3)


class TestOpenSpielErrors:
    def test_batch_size(self):
        with pytest.raises(ValueError, match=r"only supports single-environment mode .*\[4\]"):
            OpenSpielEnv("tic_tac_toe", batch_size=[4])

    def test_not_a_state(self):
        with pytest.raises(TypeError, match="wraps a pyspiel.State.*got TicTacToeGame"):
            OpenSpielWrapper(pyspiel.load_game("tic_tac_toe"))

    def test_unknown_game(self):
        with pytest.raises(
            ValueError, match="'tic_tac_to' is not an OpenSpiel game; did you mean 'tic_tac_toe'"
        ):
            OpenSpielEnv("tic_tac_to")

    def test_mean_field(self):
        with pytest.raises(RuntimeError, match="mean-field games such as 'mfg_crowd_modelling'"):
            OpenSpielEnv("mfg_crowd_modelling")

    def test_illegal_action(self):
        env = OpenSpielEnv("tic_tac_toe", categorical_actions=True)
        td = env.reset()
        td["agents", "action"] = torch.tensor([4, 0])
        td = env.step(td)["next"]
        td["agents", "action"] = torch.tensor([0, 4])  # player_1 plays the taken centre
        with pytest.raises(
            ValueError,
            match=r"player_1 played action 4, which is not legal.*\[0, 1, 2, 3, 5, 6, 7, 8\]",
        ):
            env.step(td)

    def test_step_after_done_keeps_the_final_state(self):
        env = OpenSpielEnv("matrix_rps", categorical_actions=True)
        td = env.reset()
        td["agents", "action"] = torch.tensor([0, 1])
        first = env.step(td)["next"]
        first["agents", "action"] = torch.tensor([2, 2])
        again = env.step(first)["next"]
        assert bool(again["done"]) and again["agents", "reward"].abs().sum() == 0
        torch.testing.assert_close(again["agents", "observation"], first["agents", "observation"])
        assert env.env.returns() == [-1.0, 1.0]

    def test_bad_saved_state(self):
        env = OpenSpielEnv("tic_tac_toe", return_state=True)
        td = env.reset()
        td.set_non_tensor("state", "not a state\n9 9 9")
        with pytest.raises(ValueError, match="'state' must be a serialized state"):
            env.reset(td)

    def test_bad_group_map(self):
        with pytest.raises(ValueError, match="player_1"):
            OpenSpielEnv("tic_tac_toe", group_map={"agents": ["player_0"]})


def test_docstring_examples():
    import doctest
    import importlib

    result = doctest.testmod(
        importlib.import_module("rl.envs.libs.openspiel"), optionflags=doctest.ELLIPSIS
    )
    assert result.attempted > 0 and result.failed == 0

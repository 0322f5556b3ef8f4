"""VLAAction, VLAImages, VLAObservation: typed fields that are plain nested TensorDict entries."""

import torch
from tensordict import TensorDict

from rl.core.vla import VLAAction, VLAImages, VLAObservation


class TestVLAContainers:
    def test_action_chunk_field_is_the_nested_entry(self):
        chunk = torch.arange(24.0).reshape(2, 4, 3)
        td = TensorDict({"vla_action": VLAAction(chunk=chunk, batch_size=[2])}, batch_size=[2])
        assert isinstance(td["vla_action"], VLAAction)
        # "chunk" is also a TensorDict method: the field must win
        torch.testing.assert_close(td["vla_action"].chunk, chunk)
        torch.testing.assert_close(td["vla_action", "chunk"], chunk)
        td["vla_action"].chunk = chunk + 1
        torch.testing.assert_close(td["vla_action", "chunk"], chunk + 1)

    def test_unset_fields_are_none_and_absent(self):
        action = VLAAction(tokens=torch.zeros(2, 4, 3, dtype=torch.long), batch_size=[2])
        assert action.chunk is None and action.log_probs is None
        assert set(action.to_tensordict().keys()) == {"tokens"}

    def test_observation_nests_images(self):
        obs = VLAObservation(
            images=VLAImages(image=torch.ones(2, 3, 8, 8), batch_size=[2]),
            state=torch.zeros(2, 5),
            batch_size=[2],
        )
        assert obs.images.image.shape == (2, 3, 8, 8)
        assert obs[1].state.shape == (5,)
        assert obs.preprocessed is None

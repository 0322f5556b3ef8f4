import importlib.metadata

import rl.collectors


def test_version_matches_metadata():
    assert rl.collectors.__version__ == importlib.metadata.version("rl-collectors") == "0.1.0"

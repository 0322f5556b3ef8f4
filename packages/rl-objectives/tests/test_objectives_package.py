import importlib.metadata

import rl.modules
import rl.objectives


def test_version_matches_metadata():
    assert rl.objectives.__version__ == importlib.metadata.version("rl-objectives") == "0.1.0"
    assert rl.modules.__version__ == rl.objectives.__version__

import rl.core


def test_version_is_set():
    assert rl.core.__version__ == "0.1.0"

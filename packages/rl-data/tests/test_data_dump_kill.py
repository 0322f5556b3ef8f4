"""A process SIGKILLed in the middle of ``dumps`` leaves the previous checkpoint intact."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import torch
from tensordict import TensorDict

from rl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer

N, D = 200_000, 64  # ~51 MB per checkpoint: a dump takes a noticeable time

CHILD = textwrap.dedent(
    f"""
    import sys, torch
    from tensordict import TensorDict
    from rl.data import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=0.5, eps=0.0, storage=LazyTensorStorage({N})
    )
    path = sys.argv[1]
    i = 0
    while True:
        rb.empty()
        rb.extend(TensorDict({{"x": torch.full(({N}, {D}), float(i))}}, batch_size=[{N}]))
        rb.update_priority(torch.arange({N}), float(i + 1))
        print("start", i, flush=True)
        rb.dumps(path)
        print("dumped", i, flush=True)
        i += 1
    """
)


def _fresh():
    return TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=0.5, eps=0.0, storage=LazyTensorStorage(N)
    )


def _kill_mid_dump(path):
    """Runs the child until it is killed while a temporary checkpoint file exists.

    Returns the index of the last checkpoint the child completed.
    """
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        last_done = -1
        while True:
            line = proc.stdout.readline()
            assert line, "the child exited early"
            word, i = line.split()
            if word == "dumped":
                last_done = int(i)
                continue
            if last_done < 1:
                continue
            deadline = time.monotonic() + 30
            while not list(path.glob(".replay_buffer.pt.tmp-*")):
                assert time.monotonic() < deadline, "the dump never started writing"
                time.sleep(0.001)
            time.sleep(0.01)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            leftovers = list(path.glob(".replay_buffer.pt.tmp-*"))
            if leftovers:  # the rename had not happened: we killed it mid-dump
                return last_done
            return None  # the dump finished in the window: try again
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


def test_sigkill_during_dump_keeps_previous_checkpoint(tmp_path):
    for _attempt in range(5):
        path = tmp_path / f"ckpt{_attempt}"
        last_done = _kill_mid_dump(path)
        if last_done is not None:
            break
    assert last_done is not None, "could not kill the child during a dump"
    rb = _fresh()
    rb.loads(path)
    assert len(rb) == N
    stored = rb[torch.arange(N)]["x"]
    assert stored.unique().tolist() == [float(last_done)]
    priorities = rb.sampler._sum_tree[torch.arange(N)]
    assert priorities.unique().tolist() == [float(last_done + 1)]
    # the next dump in that directory clears the dead process's temporary file
    small = _fresh()
    small.extend(TensorDict({"x": torch.zeros(1, D)}, [1]))
    small.dumps(path)
    assert sorted(p.name for p in path.iterdir()) == ["replay_buffer.pt"]
    assert os.path.getsize(path / "replay_buffer.pt") < 5_000_000  # vs ~53 MB before

"""orbax's CheckpointManager as the run's checkpoints use it."""

from jax.experimental import multihost_utils
import numpy as np

from vit_jax.checkpoints import run_checkpoints
from vit_jax.runtime import sharding
from vit_jax.training import steps


def test_checkpoints_leave_jaxs_preemption_sync_point_to_the_loop(
    tmp_path, monkeypatch):
  """jax's sync point stops a multi-process job at the call after the
  latest: orbax's calls with a step between `Preemption`'s counted calls
  made a SIGTERM go unheeded (test_training_train's two-process case)."""
  calls = []
  monkeypatch.setattr(multihost_utils, 'reached_preemption_sync_point',
                      lambda step: calls.append(step) or False)
  replicated = sharding.replicated(sharding.make_mesh())
  state = {'w': sharding.replicate(np.zeros((3, 4), np.float32), replicated)}
  sums = steps.zero_sums(replicated)
  checkpoints = run_checkpoints.RunCheckpoints(tmp_path, keep=2, min_seconds=30)
  for step in (1, 2):
    checkpoints.due(step)
    checkpoints.save(step, state, sums, [], {'epoch': 1, 'batch': step}, {})
  checkpoints.close()  # the background finalization included
  assert checkpoints.steps() == [1, 2] and not calls

"""The run in steps: epochs become steps, intervals default to an epoch,
an epoch's checkpoint waits its seconds."""

import jax
from jax.experimental import multihost_utils
import numpy as np

from tests.helpers import tiny_config
from vit_jax.training import plan


def test_epochs_become_steps_and_intervals_default_to_an_epoch():
  epochs = plan.step_plan(tiny_config('', num_epochs=3, warmup_epochs=1), 7)
  assert (epochs.total_steps, epochs.warmup_steps, epochs.log_every,
          epochs.eval_every, epochs.checkpoint_every) == (21, 7, 7, 7, 7)
  assert epochs.checkpoint_min_seconds == 30
  steps = plan.step_plan(
      tiny_config('', total_steps=100, warmup_steps=10, log_every_steps=5,
                  eval_every_steps=20, checkpoint_every_steps=50), 7)
  assert (steps.total_steps, steps.warmup_steps, steps.log_every,
          steps.eval_every, steps.checkpoint_every) == (100, 10, 5, 20, 50)
  assert steps.checkpoint_min_seconds == 0  # an interval set in steps is kept
  assert steps.epoch(14) == 2.0


class _Clock:
  def __init__(self, now: float):
    self.now = now

  def __call__(self) -> float:
    return self.now


def test_an_epochs_checkpoint_is_taken_once_its_seconds_have_passed():
  clock = _Clock(100.0)
  pace = plan.CheckpointPace(30, clock=clock)
  answers = []
  for now in (110, 129.9, 130, 140, 159, 161):
    clock.now = now
    answers.append(pace.due())
  assert answers == [False, False, True, False, False, True]
  every_time = plan.CheckpointPace(0, clock=clock)
  assert all(every_time.due() for _ in range(3))


def test_the_processes_of_a_job_take_process_0s_answer(monkeypatch):
  """Here, 5 s in, it is not due; process 0 says it is: all save."""
  asked = []

  def broadcast(local):
    asked.append(bool(local))
    return np.bool_(True)

  monkeypatch.setattr(jax, 'process_count', lambda: 2)
  monkeypatch.setattr(multihost_utils, 'broadcast_one_to_all', broadcast)
  clock = _Clock(0.0)
  pace = plan.CheckpointPace(30, clock=clock)
  clock.now = 5.0
  assert pace.due() and asked == [False]
  # Every epoch's checkpoint asks, so every process makes the same calls.
  assert pace.due() and asked == [False, False]
  monkeypatch.setattr(multihost_utils, 'broadcast_one_to_all',
                      lambda local: np.bool_(False))
  clock.now = 100.0
  assert not pace.due()  # due here, not on process 0

"""SIGTERM and Ctrl-C as a request to save and stop at an agreed step."""

import pathlib

import jax
from jax.experimental import multihost_utils

from vit_jax.runtime import stop_signals

PREEMPTED_EXIT_STATUS = stop_signals.STOPPED_EXIT_STATUS


class Preempted(Exception):  # pylint: disable=g-bad-exception-name
  """A stop signal stopped the run; everything it had done is saved."""

  def __init__(self, signal_name: str, step: int | None,
               directory: pathlib.Path, saved: bool):
    if saved:
      done = f'saved a checkpoint of step {step} in {directory} and stopped'
    elif step:
      done = (f'stopped before training, with nothing new to save (the '
              f'checkpoint of step {step} in {directory} is kept)')
    else:
      done = 'stopped before training, with nothing to save yet'
    super().__init__(f'Preempted ({signal_name}): {done}; rerun the same '
                     'command to resume.')


class Preemption:
  """Stop requests, agreed across processes by jax's service in a job."""

  def __init__(self):
    self._multi_process = jax.process_count() > 1
    if self._multi_process:
      stop_signals.hand_on_to_jax()
    # For a script calling train_and_evaluate, caught here until `close`.
    self._caught_here, self._calls = stop_signals.catch(), 0

  @property
  def signal_name(self) -> str:
    # In a multi-process job the signal may have reached another process.
    return stop_signals.received() or 'SIGTERM'

  def reached(self) -> bool:
    """Whether to stop here."""
    self._calls += 1
    return (multihost_utils.reached_preemption_sync_point(self._calls)
            if self._multi_process else stop_signals.received() is not None)

  def stop_before_training(self, checkpoints) -> None:
    """Between start-up's phases: a stop signal ends the run, nothing saved."""
    if self.reached():
      raise Preempted(self.signal_name, checkpoints.latest_step(),
                      checkpoints.directory, saved=False)

  def training(self) -> None:
    """The loop starts: a stop saves the steps in flight."""
    stop_signals.set_training(True)

  def close(self):
    stop_signals.set_training(False)
    if self._caught_here:
      stop_signals.release()
      self._caught_here = False

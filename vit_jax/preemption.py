"""SIGTERM (and what sends it: SLURM, Kubernetes, TPU maintenance) as a
request to save and stop at a step every process agrees on.
"""

import pathlib
import signal

import jax
from jax.experimental import multihost_utils

# The exit status of a run stopped by SIGTERM after saving (EX_TEMPFAIL of
# sysexits.h: a temporary failure; rerunning the command resumes).
PREEMPTED_EXIT_STATUS = 75


class Preempted(Exception):  # pylint: disable=g-bad-exception-name
  """SIGTERM stopped the run after it saved a checkpoint."""

  def __init__(self, step: int, directory: pathlib.Path):
    super().__init__(
        f'Preempted (SIGTERM): saved a checkpoint of step {step} in '
        f'{directory} and stopped; rerun the same command to resume.')
    self.step = step


class Preemption:
  """SIGTERM (what SLURM, Kubernetes and TPU maintenance send before a kill)
  as a request to save and stop, at a step every process agrees on.

  A single process catches the signal itself. In a multi-process job the
  coordination service that `jax.distributed.initialize` started catches it
  in whichever process receives it and picks the step at which all of them
  stop (`multihost_utils.reached_preemption_sync_point`). Call `reached`
  once per step, with the same steps in every process.
  """

  def __init__(self):
    self._multi_process = jax.process_count() > 1
    self._signalled = False
    self._previous = None
    if not self._multi_process:
      self._previous = signal.signal(signal.SIGTERM, self._on_signal)

  def _on_signal(self, signum, frame):
    del signum, frame
    self._signalled = True

  def reached(self, step: int) -> bool:
    if self._multi_process:
      return multihost_utils.reached_preemption_sync_point(step)
    return self._signalled

  def close(self):
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)
      self._previous = None

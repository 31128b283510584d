"""SIGTERM (and what sends it: SLURM, Kubernetes, TPU maintenance) and Ctrl-C
as a request to save and stop, at a step every process agrees on.
"""

import pathlib

import jax
from jax.experimental import multihost_utils

from vit_jax.runtime import stop_signals

# The exit status of a run stopped by SIGTERM or Ctrl-C with nothing lost.
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
    self.step = step


class Preemption:
  """SIGTERM and Ctrl-C (`stop_signals`) as a request to save and stop, at a
  step every process agrees on.

  A single process catches the signals itself. In a multi-process job the
  coordination service that `jax.distributed.initialize` started catches
  SIGTERM in whichever process receives it (a Ctrl-C is sent on to it as
  SIGTERM) and picks the call of `reached` at which all of them stop
  (`multihost_utils.reached_preemption_sync_point`): the one after the
  latest any process has made, the first if none has. So every process
  calls `reached` at the same moments, between the phases of start-up and
  once per step, and the calls are counted here, not by step: a run that
  resumes at step 500 and was signalled during start-up stops at its first
  call, before it trains.
  """

  def __init__(self):
    self._multi_process = jax.process_count() > 1
    # vit_jax.main catches the signals from its first line; a script that
    # calls train_and_evaluate has them caught here, until `close`. SIGTERM
    # is jax's preemption service's in a multi-process job; in a single
    # process it is taken back from that service, should it have started.
    self._caught_here = stop_signals.catch(sigterm=not self._multi_process)
    if self._multi_process:
      stop_signals.forward_as_sigterm()
    self._calls = 0

  @property
  def signal_name(self) -> str:
    # In a multi-process job the signal may have reached another process.
    return stop_signals.received() or 'SIGTERM'

  def reached(self) -> bool:
    """Whether to stop here."""
    self._calls += 1
    if self._multi_process:
      return multihost_utils.reached_preemption_sync_point(self._calls)
    return stop_signals.received() is not None

  def training(self) -> None:
    """The loop starts: from now on a stop saves the steps in flight."""
    stop_signals.set_training(True)

  def close(self):
    stop_signals.set_training(False)
    if self._caught_here:
      stop_signals.release()
      self._caught_here = False

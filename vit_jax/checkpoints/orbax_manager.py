"""orbax's CheckpointManager as a run's checkpoints use it
(`run_checkpoints.RunCheckpoints`): its options, the pace of an interval's
checkpoint, the stop signals left to the training loop, and the
exceptions a failed save or restore leaves behind kept off the terminal.
"""

import functools
import pathlib
import sys

import orbax.checkpoint as ocp


class _CheckpointManager(ocp.CheckpointManager):
  """orbax's, with the stop signals left to `runtime.preemption`. jax's
  preemption sync point keeps one counter, the value of the latest call,
  and stops a job at the call that passes the next value: `Preemption`
  counts its own calls, orbax passes the step (saving, deciding whether to
  save, finishing a save in the background), so its calls between ours
  would move that point to a value `Preemption` never passes, and a SIGTERM
  to a multi-process job would go unheeded."""

  def reached_preemption(self, step: int) -> bool:
    del step
    return False


def open_manager(directory: pathlib.Path, keep: int | None, create: bool,
                 reading: bool, min_seconds: float) -> ocp.CheckpointManager:
  """`keep`: the newest kept (None: all); `reading`: a reader's, which
  leaves a save in progress its temporary directory; `min_seconds`: an
  interval's checkpoint waits that long after the newest (orbax's
  ContinuousCheckpointingPolicy; 0: none)."""
  _ignore_what_orbax_abandons()
  return _CheckpointManager(directory, options=ocp.CheckpointManagerOptions(
      max_to_keep=keep, create=create, cleanup_tmp_directories=not reading,
      save_decision_policy=(
          ocp.checkpoint_managers.ContinuousCheckpointingPolicy(
              # orbax makes a timedelta of it: inf, "never", would overflow
              minimum_interval_secs=min(min_seconds, 1e12))
          if min_seconds else None)))


def _abandoned_by_orbax(unraisable) -> bool:
  """Whether an unraisable exception is what a failed save or restore,
  already reported in one line, leaves behind: tensorstore's pending
  operations calling back into orbax's closed event loop, or orbax's other
  reads of a damaged checkpoint, collected with their errors."""
  error, code = unraisable.exc_value, getattr(unraisable.object, 'cr_code',
                                              None)
  return (isinstance(error, RuntimeError) and
          str(error) == 'Event loop is closed') or (
              code is not None and '/orbax/' in code.co_filename)


@functools.cache
def _ignore_what_orbax_abandons():
  """Python prints each of `_abandoned_by_orbax`'s exceptions with a
  traceback: pages after the one line that says what failed. Installed
  once, by the first RunCheckpoints opened."""
  unraisablehook = sys.unraisablehook

  def hook(unraisable):
    if not _abandoned_by_orbax(unraisable):
      unraisablehook(unraisable)

  sys.unraisablehook = hook

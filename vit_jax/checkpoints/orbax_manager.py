"""orbax's CheckpointManager as `run_checkpoints.RunCheckpoints` uses it."""

import functools
import pathlib
import sys

import orbax.checkpoint as ocp


class _CheckpointManager(ocp.CheckpointManager):
  """orbax's, with the stop signals left to `runtime.preemption`.

  jax's preemption sync point keeps one counter; orbax's calls with the step
  between `Preemption`'s own would move the stop to a value `Preemption`
  never passes, and a multi-process job would ignore SIGTERM.
  """

  def reached_preemption(self, step: int) -> bool:
    del step
    return False


def open_manager(directory: pathlib.Path, keep: int | None, create: bool,
                 reading: bool, min_seconds: float) -> ocp.CheckpointManager:
  """`keep`: the newest kept (None: all); `reading`: leaves a save in
  progress alone; `min_seconds`: least time between interval checkpoints."""
  _ignore_what_orbax_abandons()
  return _CheckpointManager(
      directory,
      options=ocp.CheckpointManagerOptions(
          max_to_keep=keep,
          create=create,
          cleanup_tmp_directories=not reading,
          save_decision_policy=(
              ocp.checkpoint_managers.ContinuousCheckpointingPolicy(
                  # orbax makes a timedelta of it: inf, "never", would overflow
                  minimum_interval_secs=min(min_seconds, 1e12))
              if min_seconds else None)))


def _abandoned_by_orbax(unraisable) -> bool:
  """Whether an unraisable exception is left behind by a failed save or
  restore, already reported in one line."""
  error, code = unraisable.exc_value, getattr(unraisable.object, 'cr_code',
                                              None)
  return (isinstance(error, RuntimeError) and str(error)
          == 'Event loop is closed') or (code is not None and
                                         '/orbax/' in code.co_filename)


@functools.cache
def _ignore_what_orbax_abandons():
  """Keeps `_abandoned_by_orbax`'s tracebacks off the terminal."""
  unraisablehook = sys.unraisablehook

  def hook(unraisable):
    if not _abandoned_by_orbax(unraisable):
      unraisablehook(unraisable)

  sys.unraisablehook = hook

"""A run's checkpoints, `workdir/checkpoints/<step>/`, saved and verified."""

import contextlib
import dataclasses
import functools
import os
import pathlib
import sys
from typing import Any

from absl import logging
import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp

from vit_jax import errors
from vit_jax.checkpoints import digests
from vit_jax.errors import CheckpointError
from vit_jax.errors import first_line
from vit_jax.runtime import distributed


@dataclasses.dataclass(frozen=True)
class Restored:
  """Everything a run needs to go on exactly as if it had never stopped."""
  step: int
  state: Any  # steps.TrainState
  train_sums: dict  # metric sums of the unfinished logging interval
  history: list[dict]  # every record logged so far
  position: dict  # where the input's next batch comes from
  config: dict | None  # as config.json holds it; None: not held


def _unrestorable(error: BaseException) -> str:
  """What damaged a checkpoint: the error orbax wraps (tensorstore's)."""
  return first_line(list(errors.causes(error))[-1])


def _as_saved(step_dir: pathlib.Path) -> tuple[Any, Any]:
  """Restore targets: a checkpoint's state and sums as saved, on one device."""
  try:
    device = jax.local_devices(backend='cpu')[0]
  except RuntimeError:  # JAX_PLATFORMS leaves the CPU out
    device = jax.local_devices()[0]

  def target(item: str):
    metadata = ocp.StandardCheckpointHandler().metadata(step_dir / item)
    return jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct(
            leaf.shape, leaf.dtype, sharding=jax.sharding.SingleDeviceSharding(
                device)), metadata)

  return target('state'), target('train_sums')


# Checkpoints a live run may rotate away under a reader before it gives up.
_MAX_ROTATED_WHILE_READ = 10

# `keep` for a writer that keeps every step it saves: its owner deletes them.
KEEP_ALL = 0


class _CheckpointManager(ocp.CheckpointManager):
  """orbax's, the stop signals left to `runtime.preemption`."""

  # orbax's calls of jax's one-counter sync point would make a multi-process
  # job ignore SIGTERM.
  def reached_preemption(self, step: int) -> bool:
    del step
    return False


@functools.cache
def _ignore_what_orbax_abandons():
  """Hides what a failed save or restore leaves, said in one line already."""
  unraisablehook = sys.unraisablehook

  def hook(unraisable):
    error = unraisable.exc_value
    code = getattr(unraisable.object, 'cr_code', None)
    if not ((isinstance(error, RuntimeError) and
             str(error) == 'Event loop is closed') or
            (code is not None and '/orbax/' in code.co_filename)):
      unraisablehook(unraisable)

  sys.unraisablehook = hook


class RunCheckpoints(contextlib.AbstractContextManager):
  """A run's `directory/<step>/`; every process calls every method."""

  def __init__(self, directory: pathlib.Path, keep: int | None = None,
               min_seconds: float = 0.0):
    # `keep`: the newest kept; KEEP_ALL: until `delete`; None: a reader's.
    self.directory = pathlib.Path(directory).absolute()  # orbax needs it so
    self._keep = keep or None  # KEEP_ALL: orbax's None, no rotation
    self._reading = keep is None
    self._min_seconds = min_seconds
    self._manager = None

  def __exit__(self, *unused_exc_info):
    self.close()

  def _open(self, create: bool) -> ocp.CheckpointManager:
    if self._manager is None:
      _ignore_what_orbax_abandons()
      # min: orbax makes a timedelta of the interval, and inf would overflow.
      policy = ocp.checkpoint_managers.ContinuousCheckpointingPolicy(
          minimum_interval_secs=min(self._min_seconds, 1e12))
      self._manager = _CheckpointManager(
          self.directory, options=ocp.CheckpointManagerOptions(
              max_to_keep=self._keep, create=create,
              cleanup_tmp_directories=not self._reading,
              save_decision_policy=policy if self._min_seconds else None))
    return self._manager

  def due(self, step: int) -> bool:
    """Whether an interval's checkpoint is taken at `step` (`min_seconds`)."""
    return not self._min_seconds or self._open(create=True).should_save(step)

  def steps(self, fresh: bool = False) -> list[int]:
    """The steps saved here; `fresh`: listed again (a run may be writing)."""
    for attempt in range(_MAX_ROTATED_WHILE_READ):
      last = attempt == _MAX_ROTATED_WHILE_READ - 1
      try:
        if not self.directory.is_dir():
          return []
        manager = self._open(create=False)
        if fresh or attempt:
          manager.reload()
        steps = sorted(manager.all_steps())
        # Empty though a step is here: a live run keeping one checkpoint
        # renamed the new one as orbax listed; list again.
        if steps or last or not any(path.name.isdigit()
                                    for path in self.directory.iterdir()):
          return steps
      except (FileNotFoundError, NotADirectoryError):
        # A live run deleted a step between orbax's listing and reading it.
        if last:
          raise

  def steps_every_process_lists(self) -> list[int]:
    """The steps, listed afresh; an error unless every process lists them."""
    # Hosts that list other steps (a shared filesystem's stale cache) would
    # restore different states, or wait on each other's restores or deletes
    # for ever.
    steps = self.steps(fresh=True)
    distributed.check_alike(
        [np.array(steps)],
        f'list other checkpoints in {self.directory} than process 0 (process '
        f'{jax.process_index()} lists steps {steps}): '
        f'{distributed.SEE_THE_SAME_FILES}', CheckpointError)
    return steps

  def restore_latest(self, state_shapes=None,
                     sum_shapes=None) -> Restored | None:
    """The newest sound checkpoint, or None; a damaged one is set aside."""
    self.steps_every_process_lists()
    tried, damaged, deleted = set(), [], []
    while len(deleted) < _MAX_ROTATED_WHILE_READ:
      untried = [s for s in self.steps(fresh=bool(tried)) if s not in tried]
      if not untried:
        break
      step = untried[-1]
      tried.add(step)
      try:
        restored = self._restore(step, state_shapes, sum_shapes)
      except Exception as e:  # pylint: disable=broad-except
        # Rotated away (gone, or being deleted) by a run writing here.
        if not (self.directory / str(step)).exists() or any(
            s > step and s not in tried for s in self.steps(fresh=True)):
          deleted.append(step)
        else:  # orbax and tensorstore raise many types for damaged files.
          logging.warning(
              'Skipping checkpoint %s, which cannot be restored '
              '(%s); trying the one before it.', self.directory / str(step),
              _unrestorable(e))
          damaged.append(step)
        continue
      # A read that failed on some hosts only (a stale cache, a transient
      # error): set nothing aside, and train no replica from another state.
      distributed.check_alike(
          [np.array(step)],
          f'restored another checkpoint from {self.directory} than process 0 '
          f'(process {jax.process_index()} restored step {step}): '
          f'{distributed.SEE_THE_SAME_FILES}', CheckpointError)
      if damaged and not self._reading:
        # Set aside as `<step>.unrestorable`: orbax saves no step below its
        # latest.
        self.close()
        if jax.process_index() == 0:
          for bad in damaged:
            os.replace(self.directory / str(bad),
                       self.directory / f'{bad}.unrestorable')
        if jax.process_count() > 1:
          multihost_utils.sync_global_devices(
              'vit_jax: damaged checkpoints moved')
      return restored
    if damaged:
      raise CheckpointError(
          f'None of the checkpoints in {self.directory} (steps '
          f'{", ".join(map(str, sorted(damaged)))}) can be restored; the '
          'warnings above say why.' +
          ('' if self.
           _reading else ' Move the directory away to start the run afresh.'))
    if deleted:
      raise CheckpointError(
          f'The checkpoints in {self.directory} (steps '
          f'{", ".join(map(str, sorted(deleted)))}) were deleted while they '
          'were read: a run still writing there keeps replacing them. Try '
          'again, or wait until it ends.')
    return None

  def restore(self, step: int) -> Restored:
    """The verified checkpoint of `step`, on one device."""
    steps = self.steps()
    if step not in steps:
      raise CheckpointError(f'No checkpoint of step {step} in '
                            f'{self.directory}; there are {steps}.')
    try:
      return self._restore(step)
    except Exception as e:  # pylint: disable=broad-except
      if not (self.directory / str(step)).exists():
        raise CheckpointError(
            f'The checkpoint {self.directory / str(step)} was deleted while '
            'it was read: a run still writing there replaced it (now: steps '
            f'{self.steps(fresh=True)}).') from e
      others = [s for s in steps if s != step]
      rest = f'the others are steps {others}' if others else 'there is no other'
      raise CheckpointError(
          f'The checkpoint {self.directory / str(step)} cannot be restored '
          f'({_unrestorable(e)}); {rest}.') from e

  def _restore(self, step: int, state_shapes=None, sum_shapes=None) -> Restored:
    """`restore` unchecked: raises what orbax raises, or DigestMismatchError."""
    step_dir = self.directory / str(step)
    if state_shapes is None:
      state_shapes, sum_shapes = _as_saved(step_dir)
    held = {path.name for path in step_dir.iterdir()}
    items = dict.fromkeys(held & {'history', 'position', 'config', 'digest'},
                          ocp.args.JsonRestore())
    restored = self._open(create=False).restore(
        step, args=ocp.args.Composite(
            state=ocp.args.StandardRestore(state_shapes),
            train_sums=ocp.args.StandardRestore(sum_shapes), **items))
    result = Restored(step, restored.state, dict(restored.train_sums),
                      list(restored.history), dict(restored.position),
                      restored.get('config'))
    if 'digest' in held:
      digests.verify(restored.digest, result.state, result.train_sums,
                     result.history, result.position, result.config)
    elif 'config' in held:  # saved with a digest, which is lost
      raise digests.DigestMismatchError('its digest is missing')
    else:
      logging.warning('Checkpoint %s predates digests: restored unverified.',
                      step_dir)
    return result

  def latest_config(self) -> tuple[int, dict] | None:
    """The step and verified config of the newest checkpoint with one."""
    for step in reversed(self.steps()):
      step_dir = self.directory / str(step)
      if not (step_dir / 'config').is_dir():
        continue
      try:
        read = self._open(create=False).restore(
            step, args=ocp.args.Composite(config=ocp.args.JsonRestore(),
                                          digest=ocp.args.JsonRestore()))
        digests.verify_config(read.digest, read.config)
        return step, dict(read.config)
      except Exception as e:  # pylint: disable=broad-except
        logging.warning(
            'Skipping the config of checkpoint %s, which '
            'cannot be read (%s).', step_dir, _unrestorable(e))
    return None

  def save(self, step: int, state, train_sums: dict, history: list[dict],
           position: dict, config: dict):
    """`config`: as config.json holds it, which it outlives."""
    self.check()
    # A copy: orbax writes the JSON in the background while the loop logs.
    history = list(history)
    contents = digests.compute(state, train_sums, history, position, config)
    manager = self._open(create=True)
    if step <= max(manager.all_steps(), default=-1):
      raise CheckpointError(
          f'orbax would not save step {step} in {self.directory} (it holds '
          f'steps {manager.all_steps()}); move the directory away.')
    with self._failed_saves_raised():
      # Forced: the loop decided (`due`).
      manager.save(
          step, force=True,
          args=ocp.args.Composite(state=ocp.args.StandardSave(state),
                                  train_sums=ocp.args.StandardSave(train_sums),
                                  history=ocp.args.JsonSave(history),
                                  position=ocp.args.JsonSave(position),
                                  config=ocp.args.JsonSave(config),
                                  digest=ocp.args.JsonSave(contents)))

  def delete(self, steps: list[int]):
    """Deletes the checkpoints of `steps`, the same in every process."""
    for step in steps:
      self._open(create=False).delete(step)

  def check(self, wait: bool = False):
    """CheckpointError if the last save failed; `wait`: for the one saving."""
    if self._manager is not None and (
        wait or not self._manager.is_saving_in_progress()):
      with self._failed_saves_raised():
        self._manager.wait_until_finished()

  @contextlib.contextmanager
  def _failed_saves_raised(self):
    try:
      yield
    except Exception as e:  # pylint: disable=broad-except
      # orbax and tensorstore raise many types for a failed write.
      self._manager = None  # its threads are stuck on the failed write
      good = sorted(
          int(p.name) for p in self.directory.glob('*') if p.name.isdigit())
      kept = (f'the newest complete checkpoint, step {good[-1]}, is kept'
              if good else 'no checkpoint was complete before it')
      fix = (f'Free space there (df -h {self.directory}) or pass a --workdir '
             'with room' if errors.out_of_space(e) else
             'Check that the directory is writable')
      raise CheckpointError(
          f'Saving a checkpoint in {self.directory} failed ({first_line(e)}); '
          f'{kept}. {fix}, then rerun to resume.') from e

  def latest_step(self) -> int | None:
    return (self.steps() or [None])[-1]

  def close(self, quietly: bool = False):
    """Waits for the save in flight; `quietly`: logs its failure, not raises."""
    if self._manager is None:
      return
    try:
      with self._failed_saves_raised():
        self._manager.wait_until_finished()
        self._manager.close()
    except CheckpointError as e:
      if not quietly:
        raise
      logging.warning('%s', e)
    self._manager = None

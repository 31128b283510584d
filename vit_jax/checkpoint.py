"""Where state is saved: our training runs' checkpoints, and reading them back.

`RunCheckpoints` is where the training loop saves and restores its state:
`workdir/checkpoints/<step>/`. `load_run` reads a `vit_jax.main` workdir for
analysis, fine-tuning and distillation; `load_params` takes a workdir or a
released `.npz`. Other formats are `vit_jax.formats`'; their `load_npz`,
`save_npz`, `check_params` and `param_shapes` are also importable from here.
"""

import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import pathlib
from typing import Any

from absl import logging
import jax
from jax.experimental import multihost_utils
import jax.numpy as jnp
import ml_collections
import orbax.checkpoint as ocp

from vit_jax.errors import CheckpointError
from vit_jax.errors import first_line
from vit_jax.formats import npz
from vit_jax.formats import params as params_lib

# The released format's readers and writer, and the fit check, where users'
# scripts have always found them.
load_npz = npz.load_npz
save_npz = npz.save_npz
check_params = params_lib.check_params
param_shapes = params_lib.param_shapes


# ------------------------------------------------------- training runs -----


@dataclasses.dataclass(frozen=True)
class Restored:
  """Everything a run needs to go on exactly as if it had never stopped."""
  step: int
  state: Any  # steps.TrainState
  train_sums: dict  # metric sums of the unfinished logging interval
  history: list[dict]  # every record logged so far
  position: dict  # where the input's next batch comes from


def _array_digest(x: jax.Array) -> jax.Array:
  """A uint32 of every bit of `x`: its elements' bits (in 32-bit words, or
  bytes and half-words for smaller types), each multiplied by an odd weight
  of its position, summed modulo 2**32, so that a change in any one element
  always changes it."""
  if jnp.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  if x.dtype == jnp.bool_:
    x = x.astype(jnp.uint8)
  word = {1: jnp.uint8, 2: jnp.uint16}.get(x.dtype.itemsize, jnp.uint32)
  bits = jax.lax.bitcast_convert_type(x, word).ravel().astype(jnp.uint32)
  weights = jnp.arange(bits.size, dtype=jnp.uint32) * jnp.uint32(
      2654435761) | jnp.uint32(1)
  return jnp.sum(bits * weights, dtype=jnp.uint32)


@jax.jit
def _tree_digests(tree) -> list[jax.Array]:
  return [_array_digest(x) for x in jax.tree.leaves(tree)]


def _json_digest(value) -> str:
  return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def digest(state, train_sums: dict, history: list[dict],
           position: dict) -> dict:
  """What a checkpoint's contents must hash to: one number per array
  (computed where the arrays are, so nothing is copied to the host) and a
  sha256 of each JSON item."""
  return {
      'state': [int(d) for d in jax.device_get(_tree_digests(state))],
      'train_sums': [int(d) for d in jax.device_get(_tree_digests(train_sums))],
      'history': _json_digest(history),
      'position': _json_digest(position),
  }


class DigestMismatchError(ValueError):
  """A restored checkpoint does not hash to the digest saved with it."""


def _verify(restored) -> None:
  found = digest(restored.state, restored.train_sums, restored.history,
                 restored.position)
  differ = [k for k in found if found[k] != restored.digest.get(k)]
  if differ:
    raise DigestMismatchError(
        f'its {" and ".join(differ)} {"does" if len(differ) == 1 else "do"} '
        'not match the digest saved with it: a damaged file')


def _out_of_space(error: BaseException | None) -> bool:
  """Whether `error` or one it arose from says the disk or quota is full."""
  while error is not None:
    if (isinstance(error, OSError) and
        error.errno in (errno.ENOSPC, errno.EDQUOT)) or any(
            s in str(error) for s in ('No space left', 'RESOURCE_EXHAUSTED',
                                      'Disk quota exceeded')):
      return True
    error = error.__cause__ or error.__context__
  return False


class RunCheckpoints:
  """The checkpoints of a run, `directory/<step>/`, the newest
  `keep` kept. Each holds a `Restored`'s fields: the train state, the train
  metric sums of the unfinished logging interval, the history of logged
  records and the input's position, and their `digest`, which a restore
  verifies. Saves are asynchronous; orbax writes a checkpoint under a
  temporary name and renames it when complete, so a killed save leaves no
  step behind, only a temporary directory that the next run removes. A save
  that fails in the background raises CheckpointError at the next `check`,
  `save` or `close`.

  Multi-process: every process calls every method; orbax coordinates them.
  """

  def __init__(self, directory: pathlib.Path, keep: int):
    self.directory = pathlib.Path(directory).absolute()  # orbax needs it so
    self._keep = keep
    self._manager = None

  def _open(self, create: bool) -> ocp.CheckpointManager:
    if self._manager is None:
      self._manager = ocp.CheckpointManager(
          self.directory,
          options=ocp.CheckpointManagerOptions(
              max_to_keep=self._keep, create=create,
              cleanup_tmp_directories=True))
    return self._manager

  def steps(self) -> list[int]:
    if not self.directory.is_dir():
      return []
    return sorted(self._open(create=False).all_steps())

  def restore_latest(self, state_shapes, sum_shapes) -> Restored | None:
    """The newest checkpoint that restores, onto the shardings of the
    shapes given; one that does not (damaged, or not a checkpoint of this
    kind) is skipped with a warning naming it. None when there is none;
    CheckpointError when none of several restores."""
    steps, damaged = self.steps(), []
    for step in reversed(steps):
      verified = (self.directory / str(step) / 'digest').is_dir()
      items = dict(state=ocp.args.StandardRestore(state_shapes),
                   train_sums=ocp.args.StandardRestore(sum_shapes),
                   history=ocp.args.JsonRestore(),
                   position=ocp.args.JsonRestore())
      if verified:
        items['digest'] = ocp.args.JsonRestore()
      try:
        restored = self._open(create=False).restore(
            step, args=ocp.args.Composite(**items))
        if verified:
          _verify(restored)
        else:
          logging.warning('Checkpoint %s predates digests: restored '
                          'unverified.', self.directory / str(step))
      except Exception as e:  # pylint: disable=broad-except
        # orbax and tensorstore raise many types for damaged files.
        logging.warning('Skipping checkpoint %s, which cannot be restored '
                        '(%s); trying the one before it.',
                        self.directory / str(step), first_line(e))
        damaged.append(step)
        continue
      self._set_aside(damaged)
      return Restored(step, restored.state, dict(restored.train_sums),
                      list(restored.history), dict(restored.position))
    if steps:
      raise CheckpointError(
          f'None of the checkpoints in {self.directory} (steps '
          f'{", ".join(map(str, steps))}) can be restored; the warnings above '
          'say why. Move the directory away to start the run afresh.')
    return None

  def _set_aside(self, steps: list[int]):
    """Renames damaged checkpoints `<step>.unrestorable`, so that the run
    saves those steps again (orbax would not save below its latest step)."""
    if not steps:
      return
    self.close()
    if jax.process_index() == 0:
      for step in steps:
        os.replace(self.directory / str(step),
                   self.directory / f'{step}.unrestorable')
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices('vit_jax: damaged checkpoints moved')

  def save(self, step: int, state, train_sums: dict, history: list[dict],
           position: dict):
    self.check()
    # orbax writes the JSON items later, in the background: a copy, so that
    # records the loop logs meanwhile are not in this checkpoint.
    history = list(history)
    contents = digest(state, train_sums, history, position)
    with self._failed_saves_raised():
      saved = self._open(create=True).save(
          step, args=ocp.args.Composite(
              state=ocp.args.StandardSave(state),
              train_sums=ocp.args.StandardSave(train_sums),
              history=ocp.args.JsonSave(history),
              position=ocp.args.JsonSave(position),
              digest=ocp.args.JsonSave(contents)))
    if not saved:
      raise CheckpointError(
          f'orbax declined to save step {step} in {self.directory} (it holds '
          f'steps {self._manager.all_steps()}); move the directory away.')

  def check(self):
    """Raises CheckpointError if the last save, written in the background,
    failed (orbax keeps its error until someone waits for it)."""
    if self._manager is not None and not self._manager.is_saving_in_progress():
      with self._failed_saves_raised():
        self._manager.wait_until_finished()

  @contextlib.contextmanager
  def _failed_saves_raised(self):
    try:
      yield
    except Exception as e:  # pylint: disable=broad-except
      # orbax and tensorstore raise many types for a failed write.
      self._manager = None  # its threads are stuck on the failed write
      good = sorted(int(p.name) for p in self.directory.glob('*')
                    if p.name.isdigit())
      kept = (f'the newest complete checkpoint, step {good[-1]}, is kept'
              if good else 'no checkpoint was complete before it')
      fix = (f'Free space there (df -h {self.directory}) or pass a --workdir '
             'with room' if _out_of_space(e) else
             'Check that the directory is writable')
      raise CheckpointError(
          f'Saving a checkpoint in {self.directory} failed ({first_line(e)}); '
          f'{kept}. {fix}, then rerun to resume.') from e

  def latest_step(self) -> int | None:
    return (self.steps() or [None])[-1]

  def close(self, quietly: bool = False):
    """Waits for the save in flight. `quietly`: when another error already
    stops the run, a failed save is logged instead of raised over it."""
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


@dataclasses.dataclass(frozen=True)
class Run:
  config: ml_collections.ConfigDict
  params: Any
  batch_stats: Any  # {} for models without BatchNorm
  step: int

  @property
  def variables(self) -> dict:
    if self.batch_stats:
      return {'params': self.params, 'batch_stats': self.batch_stats}
    return {'params': self.params}


def load_run(workdir: str | pathlib.Path, step: int | None = None) -> Run:
  """The config and the model variables of a `vit_jax.main` workdir.

  Reads the checkpoint of `step` (default: the latest) onto this process's
  first device, whatever devices the run was trained on.
  """
  workdir = pathlib.Path(workdir)
  config_file = workdir / 'config.json'
  if not config_file.exists():
    raise CheckpointError(f'{workdir} has no config.json: pass the --workdir '
                          'of a run of `python -m vit_jax.main`.')
  config = ml_collections.ConfigDict(json.loads(config_file.read_text()))
  manager = ocp.CheckpointManager(
      (workdir / 'checkpoints').absolute(),
      item_handlers={'state': ocp.StandardCheckpointHandler()})
  with manager:
    steps = manager.all_steps()
    if not steps:
      raise CheckpointError(f'{workdir / "checkpoints"} holds no checkpoint '
                            'yet; train until the first one is saved.')
    step = max(steps) if step is None else step
    if step not in steps:
      raise CheckpointError(f'No checkpoint of step {step} in {workdir}; '
                            f'there are {sorted(steps)}.')
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    target = jax.tree.map(
        lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype,
                                          sharding=device),
        manager.item_metadata(step)['state'])
    state = manager.restore(
        step,
        args=ocp.args.Composite(state=ocp.args.StandardRestore(target))).state
  return Run(config, state['params'], state.get('batch_stats') or {}, step)


def load_params(path_or_workdir: str | pathlib.Path,
                step: int | None = None) -> Any:
  """Parameters from a released `.npz` file or a `vit_jax.main` workdir.

  A workdir gives its checkpoint of `step` (default: the latest) as arrays on
  the first device, a `.npz` gives numpy arrays; both in our tree.
  """
  path = pathlib.Path(path_or_workdir)
  if path.is_dir():
    return load_run(path, step).params
  if step is not None:
    raise CheckpointError(f'{path} is one .npz checkpoint; step={step} only '
                          'selects among the checkpoints of a run directory.')
  return npz.load_npz(path)



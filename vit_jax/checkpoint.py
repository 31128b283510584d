"""Checkpoints: our training runs, and ViT parameters in the released .npz.

`RunCheckpoints` is where the training loop saves and restores its state:
`workdir/checkpoints/<step>/`. `load_run` reads a `vit_jax.main` workdir for
analysis. `load_npz` and `save_npz` read and write the flat `.npz` layout of
the official google-research/vision_transformer releases, so published
weights load here and ours load there. `load_params` takes either, and
`check_params` says which key does not fit a model.
"""

from collections.abc import Mapping
import contextlib
import dataclasses
import errno
import functools
import hashlib
import json
import os
import pathlib
import re
from typing import Any
import zipfile

from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import orbax.checkpoint as ocp

from vit_jax.errors import CheckpointError
from vit_jax.errors import first_line




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
      from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
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


# Inside an encoder block the released files number submodules across types
# (pre-linen flax: LayerNorm_0, MultiHeadDotProductAttention_1, LayerNorm_2,
# MlpBlock_3); linen, and so our model, numbers them per type.
_RELEASED_TO_OURS = {
    'MultiHeadDotProductAttention_1': 'MultiHeadDotProductAttention_0',
    'LayerNorm_2': 'LayerNorm_1',
    'MlpBlock_3': 'MlpBlock_0',
}
_OURS_TO_RELEASED = {ours: old for old, ours in _RELEASED_TO_OURS.items()}
_ENCODER_BLOCK = re.compile(r'encoderblock_\d+')
# Every ViT has these, whatever its classifier or head; a file without them is
# some other kind of .npz.
_REQUIRED_KEYS = ('embedding/kernel',
                  'Transformer/posembed_input/pos_embedding',
                  'Transformer/encoder_norm/scale')
# Enough of a long list of problems to act on, short enough to read.
_MAX_REPORTED = 12


def _rename_block_child(key: str, names: dict[str, str]) -> str:
  """`key` with its encoder-block submodule renamed by `names`."""
  parts = key.split('/')
  if (len(parts) > 2 and parts[0] == 'Transformer' and
      _ENCODER_BLOCK.fullmatch(parts[1])):
    parts[2] = names.get(parts[2], parts[2])
  return '/'.join(parts)


def _renamed(flat: dict[str, Any], names: dict[str, str],
             source: str) -> dict[str, Any]:
  renamed = {}
  for key, value in flat.items():
    new_key = _rename_block_child(key, names)
    if new_key in renamed:
      # Both numberings in one block: no way to tell which array is meant.
      clashing = [k for k in flat if _rename_block_child(k, names) == new_key]
      raise CheckpointError(f'In {source}, {" and ".join(clashing)} are the '
                            'same parameter in the two numberings of '
                            'encoder-block submodules; keep one.')
    renamed[new_key] = value
  return renamed


def _flatten(tree: Mapping[str, Any], source: str,
             prefix: str = '') -> dict[str, Any]:
  """{'a/b': leaf} from {'a': {'b': leaf}}, in the tree's order."""
  flat = {}
  for name, value in tree.items():
    if not isinstance(name, str) or not name or '/' in name:
      raise CheckpointError(f'In {source}, the key {prefix}{name!r} is not '
                            'usable: keys must be non-empty strings without '
                            '"/", which separates them in .npz key paths.')
    if isinstance(value, Mapping):
      flat.update(_flatten(value, source, f'{prefix}{name}/'))
    else:
      flat[prefix + name] = value
  return flat


def _unflatten(flat: dict[str, Any], source: str) -> dict[str, Any]:
  tree = {}
  for key, value in flat.items():
    *parents, leaf = key.split('/')
    node = tree
    for depth, name in enumerate(parents):
      node = node.setdefault(name, {})
      if not isinstance(node, dict):
        raise CheckpointError(f'{source} has both an array '
                              f'{"/".join(parents[:depth + 1])} and arrays '
                              f'under it, such as {key}.')
    if leaf in node:
      raise CheckpointError(f'{source} has both an array {key} and arrays '
                            'under it.')
    node[leaf] = value
  return tree


def load_npz(path: str | pathlib.Path) -> dict[str, Any]:
  """ViT parameters from a `.npz` in the official released layout.

  Accepts both numberings of the encoder-block submodules (the released
  `MultiHeadDotProductAttention_1`, `LayerNorm_2`, `MlpBlock_3` and ours,
  `..._0`, `LayerNorm_1`, `MlpBlock_0`) and returns our tree of numpy arrays,
  which `model.apply({'params': ...}, ...)` takes as it is. Only the layout is
  checked here; `check_params` checks the shapes against a model.
  """
  path = pathlib.Path(path)
  if path.is_dir():
    raise CheckpointError(f'{path} is a directory, not a .npz file; '
                          '`load_params` also reads run directories.')
  if not path.exists():
    raise CheckpointError(f'No checkpoint at {path}: pass a released ViT .npz '
                          'file or the --workdir of a `vit_jax.main` run.')
  try:
    # No pickles: a parameter file has no business running code on load.
    data = np.load(path, allow_pickle=False)
    if isinstance(data, np.lib.npyio.NpzFile):
      with data:
        flat = {key: data[key] for key in data.files}
  except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
    raise CheckpointError(f'{path} is not a readable .npz file: {e}') from e
  if not isinstance(data, np.lib.npyio.NpzFile):
    raise CheckpointError(f'{path} is a single .npy array, not a .npz of '
                          'named parameters.')
  missing = [key for key in _REQUIRED_KEYS if key not in flat]
  if missing:
    found = ', '.join(sorted(flat)[:_MAX_REPORTED]) or 'no arrays'
    raise CheckpointError(
        f'{path} is not a ViT checkpoint in the official .npz layout: it has '
        f'no {", ".join(missing)}. It has {found}'
        f'{" ..." if len(flat) > _MAX_REPORTED else ""}.')
  return _unflatten(_renamed(flat, _RELEASED_TO_OURS, str(path)), str(path))


def save_npz(params: Mapping[str, Any], path: str | pathlib.Path) -> None:
  """Writes ViT parameters in the official released `.npz` layout.

  The keys use the released numbering, so the file loads in code written for
  the official checkpoints; `load_npz` gives back `params` bit for bit. The
  file is replaced in one step, so a crash leaves the old file or the new one.
  """
  path = pathlib.Path(path)
  if 'params' in params:
    raise CheckpointError(f'Not saving {path}: pass the parameters, '
                          "variables['params'], not the variables.")
  flat = _renamed(_flatten(params, 'the parameters'), _OURS_TO_RELEASED,
                  'the parameters')
  arrays = {key: np.asarray(value) for key, value in flat.items()}
  for key, array in arrays.items():
    descr = np.lib.format.dtype_to_descr(array.dtype)
    if array.dtype.hasobject or np.lib.format.descr_to_dtype(descr) != (
        array.dtype):
      # e.g. bfloat16 is written as raw bytes that read back as void.
      raise CheckpointError(f'Not saving {path}: {key} is {array.dtype}, '
                            'which .npz cannot store; cast it to float32.')
  path.parent.mkdir(parents=True, exist_ok=True)
  partial = path.with_name(path.name + '.partial')
  # What np.savez writes, without its keyword arguments, which a parameter
  # named `file` or `allow_pickle` would collide with.
  try:
    with zipfile.ZipFile(partial, 'w', zipfile.ZIP_STORED,
                         allowZip64=True) as archive:
      for key, array in arrays.items():
        with archive.open(key + '.npy', 'w', force_zip64=True) as member:
          np.lib.format.write_array(member, array, allow_pickle=False)
    os.replace(partial, path)
  except BaseException:
    partial.unlink(missing_ok=True)
    raise


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
  return load_npz(path)


def param_shapes(model: nn.Module,
                 image_size: int | tuple[int, int]) -> dict[str, Any]:
  """`model`'s parameter shapes and dtypes for RGB images of `image_size`.

  Computes no parameters (`jax.eval_shape`), so it is cheap for any model.
  """
  height, width = ((image_size, image_size) if isinstance(image_size, int)
                   else image_size)
  variables = jax.eval_shape(
      functools.partial(model.init, train=False), jax.random.key(0),
      jax.ShapeDtypeStruct((1, height, width, 3), jnp.float32))
  return variables['params']


def check_params(params: Mapping[str, Any],
                 expected: Mapping[str, Any],
                 *,
                 source: str = 'the checkpoint',
                 target: str = 'the model') -> None:
  """Raises `CheckpointError` unless `params` has exactly `expected`'s shapes.

  `expected` is any tree with shaped leaves, e.g. `param_shapes(model, 224)`.
  The error names every missing, unexpected or wrongly shaped key path, with
  `source` and `target` (e.g. 'ViT-B_16.npz', 'ViT-B_16 at 384x384') naming
  the two sides. Dtypes are not compared: float32 weights drive a bfloat16
  model too.
  """
  have = {key: tuple(np.shape(value))
          for key, value in _flatten(params, source).items()}
  want = {key: tuple(value.shape)
          for key, value in _flatten(expected, target).items()}
  # Wrong shapes and unexpected keys first: they are usually few and tell
  # most, while a wrong depth or naming can leave hundreds of keys missing.
  problems = [
      f'{key} has shape {have[key]} in {source} but {shape} in {target}'
      for key, shape in want.items() if key in have and have[key] != shape
  ]
  problems += [
      f'{key} (shape {shape}) is in {source} but not in {target}'
      for key, shape in have.items() if key not in want
  ]
  problems += [
      f'{key} is missing from {source} but {target} has it with shape {shape}'
      for key, shape in want.items() if key not in have
  ]
  if len(problems) == 1:
    raise CheckpointError(problems[0] + '.')
  if problems:
    more = len(problems) - _MAX_REPORTED
    raise CheckpointError(
        f'{source[:1].upper()}{source[1:]} does not fit {target} '
        f'({len(problems)} problems):\n  ' +
        '\n  '.join(problems[:_MAX_REPORTED]) +
        (f'\n  ... and {more} more' if more > 0 else ''))

"""The official google-research/vision_transformer `.npz`."""

from collections.abc import Mapping
import pathlib
import re
from typing import Any
import zipfile

import numpy as np

from vit_jax.errors import CheckpointError
from vit_jax.formats import params as params_lib
from vit_jax.models import names
from vit_jax.runtime import files

# The released files number block submodules across types (pre-linen flax);
# linen numbers them per type.
_RELEASED_TO_OURS = dict(MultiHeadDotProductAttention_1=names.ATTENTION,
                         LayerNorm_2='LayerNorm_1', MlpBlock_3=names.MLP)
_OURS_TO_RELEASED = {ours: old for old, ours in _RELEASED_TO_OURS.items()}
_BLOCK_CHILD = re.compile(
    rf'^({names.ENCODER}/{names.BLOCK_PREFIX}\d+/)([^/]+)')
_NPY_MAGIC = b'\x93NUMPY'
# Every ViT has these; a file without them is some other kind of .npz.
_REQUIRED_KEYS = (f'{names.PATCH_EMBEDDING}/kernel',
                  names.path(names.POSITION_EMBEDDING_TABLE),
                  names.path(names.ENCODER_NORM_SCALE))


def _rename_block_child(key: str, renames: dict[str, str]) -> str:
  return _BLOCK_CHILD.sub(
      lambda match: match[1] + renames.get(match[2], match[2]), key)


def _renamed(flat: dict[str, Any], renames: dict[str, str],
             source: str) -> dict[str, Any]:
  renamed = {}
  for key, value in flat.items():
    new_key = _rename_block_child(key, renames)
    if new_key in renamed:
      clashing = [k for k in flat if _rename_block_child(k, renames) == new_key]
      raise CheckpointError(f'In {source}, {" and ".join(clashing)} are the '
                            'same parameter in the two numberings of '
                            'encoder-block submodules; keep one.')
    renamed[new_key] = value
  return renamed


def load_npz(path: str | pathlib.Path) -> dict[str, Any]:
  """Our tree from an official `.npz`; `check_params` checks the shapes."""
  path = pathlib.Path(path)
  try:
    with path.open('rb') as f:
      start = f.read(len(_NPY_MAGIC))
  except OSError as e:
    raise CheckpointError(f'Cannot read {path}: {e.strerror or e}.') from e
  if start == _NPY_MAGIC:
    raise CheckpointError(f'{path} is a single .npy array, not a .npz of '
                          'named parameters.')
  # numpy's messages about pickles suggest allow_pickle: never shown.
  if not zipfile.is_zipfile(path) and start[:2] in (b'', b'PK'):
    raise CheckpointError(f'{path} is empty or cut short (an interrupted '
                          'download or copy?): fetch it again.')
  if not zipfile.is_zipfile(path):
    raise CheckpointError(f'{path} is not a .npz file (a zip archive of '
                          'arrays): pass a released ViT .npz or the workdir '
                          'of a `vit_jax.main` run.')
  try:
    with np.load(path, allow_pickle=False) as data:
      flat = {key: data[key] for key in data.files}
  except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
    reason = ('it holds pickled Python objects, which are not loaded: they '
              'can run code' if 'pickle' in str(e) else str(e))
    raise CheckpointError(f'{path} is not a readable .npz file: '
                          f'{reason}.') from e
  if odd := [k for k, array in flat.items() if array.dtype.kind not in 'biuf']:
    raise CheckpointError(f'{path} holds {odd[0]} as {flat[odd[0]].dtype} '
                          '(bfloat16 saved by numpy?): save it as float32.')
  if missing := [key for key in _REQUIRED_KEYS if key not in flat]:
    found = files.some_names(sorted(flat), params_lib.MAX_REPORTED)
    raise CheckpointError(
        f'{path} is not a ViT checkpoint in the official .npz layout: it has '
        f'no {", ".join(missing)}. It has {found or "no arrays"}.')
  return params_lib.unflatten(_renamed(flat, _RELEASED_TO_OURS, str(path)),
                              str(path))


def save_npz(params: Mapping[str, Any], path: str | pathlib.Path) -> None:
  """Writes ViT parameters in the official `.npz` layout, atomically."""
  path = pathlib.Path(path)
  if 'params' in params:
    raise CheckpointError(f'Not saving {path}: pass the parameters, '
                          "variables['params'], not the variables.")
  flat = _renamed(
      params_lib.flatten(params_lib.unstack_blocks(params), 'the parameters'),
      _OURS_TO_RELEASED, 'the parameters')
  arrays = {key: np.asarray(value) for key, value in flat.items()}
  for key, array in arrays.items():
    if array.dtype.hasobject or np.lib.format.descr_to_dtype(
        np.lib.format.dtype_to_descr(array.dtype)) != array.dtype:
      # e.g. bfloat16 is written as raw bytes that read back as void.
      raise CheckpointError(f'Not saving {path}: {key} is {array.dtype}, '
                            'which .npz cannot store; cast it to float32.')
  path.parent.mkdir(parents=True, exist_ok=True)

  def write(partial: pathlib.Path):
    with open(partial, 'wb') as f:  # a path would gain '.npz'
      np.savez(f, **arrays)

  files.replace_atomically(path, write)

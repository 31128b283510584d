"""`.safetensors` files, the hub's format for timm and transformers weights,
read and written with safetensors' numpy API: no torch, and no pickles
(the format holds raw arrays and a JSON header, nothing that runs code).
"""

import pathlib

import numpy as np
import safetensors
import safetensors.numpy

from vit_jax.errors import CheckpointError
from vit_jax.runtime import files

# The name timm's and transformers' hub folders give their weights.
WEIGHTS_NAME = 'model.safetensors'


def is_safetensors(path: pathlib.Path) -> bool:
  """Whether `path` starts like a .safetensors file: an 8-byte little-endian
  header length, then a JSON object."""
  try:
    with pathlib.Path(path).open('rb') as f:
      start = f.read(9)
  except OSError:
    return False
  return len(start) == 9 and start[8:9] == b'{'


def _unreadable(path, error: Exception) -> CheckpointError:
  return CheckpointError(f'{path} is not a readable .safetensors file: '
                         f'{error}.')


def names(path: pathlib.Path) -> list[str]:
  """The names of the arrays in a .safetensors file, from its header alone."""
  try:
    with safetensors.safe_open(str(path), framework='numpy') as f:
      return list(f.keys())
  except (safetensors.SafetensorError, OSError) as e:
    raise _unreadable(path, e) from e


def read(path: pathlib.Path) -> dict[str, np.ndarray]:
  """Every array of a .safetensors file, by name (bfloat16 as ml_dtypes'
  bfloat16); CheckpointError in one line for a file that is not one."""
  try:
    return safetensors.numpy.load_file(str(path))
  except (safetensors.SafetensorError, OSError) as e:
    raise _unreadable(path, e) from e


def write(path: pathlib.Path, arrays: dict[str, np.ndarray],
          metadata: dict[str, str] | None = None) -> None:
  """`arrays` as the .safetensors file `path`, replaced in one step so that
  a crash leaves the old file or the new one."""
  arrays = {key: np.ascontiguousarray(value) for key, value in arrays.items()}
  path.parent.mkdir(parents=True, exist_ok=True)
  files.replace_atomically(
      path, lambda partial: safetensors.numpy.save_file(
          arrays, str(partial), metadata=metadata))

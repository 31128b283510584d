"""`.safetensors` files through safetensors' numpy API: no torch, no pickles."""

import pathlib

import numpy as np
import safetensors
import safetensors.numpy

from vit_jax.errors import CheckpointError
from vit_jax.runtime import files

WEIGHTS_NAME = 'model.safetensors'


def is_safetensors(path: pathlib.Path) -> bool:
  """Whether `path` starts as a .safetensors file: 8 bytes, then JSON."""
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
  """Every array of a .safetensors file, by name (bfloat16 as ml_dtypes')."""
  try:
    return safetensors.numpy.load_file(str(path))
  except (safetensors.SafetensorError, OSError) as e:
    raise _unreadable(path, e) from e


def write(path: pathlib.Path, arrays: dict[str, np.ndarray],
          metadata: dict[str, str] | None = None) -> None:
  """`arrays` as the .safetensors file `path`, replaced atomically."""
  arrays = {key: np.ascontiguousarray(value) for key, value in arrays.items()}
  path.parent.mkdir(parents=True, exist_ok=True)
  files.replace_atomically(
      path, lambda partial: safetensors.numpy.save_file(arrays, str(partial),
                                                        metadata=metadata))

"""CIFAR-10 and CIFAR-100, either official release read into memory."""

import contextlib
import pathlib
import pickle

import numpy as np

from vit_jax.data import download
from vit_jax.data.dataset import ArraySource
from vit_jax.data.dataset import Dataset
from vit_jax.errors import DatasetError

NUM_CLASSES = {'cifar10': 10, 'cifar100': 100}
# Where each release names its classes: the binary one's text file, the
# python one's pickle and its key.
_CLASS_NAMES = dict(
    cifar10=('batches.meta.txt', 'batches.meta', b'label_names'),
    cifar100=('fine_label_names.txt', 'meta', b'fine_label_names'))

_SIDE = 32
_PIXELS = _SIDE * _SIDE * 3


def _read_binary(path: pathlib.Path, label_bytes: int,
                 label_offset: int) -> ArraySource:
  raw, record = np.fromfile(path, dtype=np.uint8), label_bytes + _PIXELS
  if raw.size == 0 or raw.size % record:
    raise DatasetError(f'{path} is not a CIFAR binary file: {raw.size} '
                       f'bytes is not a multiple of the {record}-byte record.')
  raw = raw.reshape(-1, record)
  return ArraySource(_planar_to_nhwc(raw[:, label_bytes:]),
                     raw[:, label_offset].astype(np.int32))


# All the official python batches hold: nothing else is unpickled, so a
# crafted file cannot run code.
_PICKLE_GLOBALS = frozenset({('numpy.core.multiarray', '_reconstruct'),
                             ('numpy._core.multiarray', '_reconstruct'),
                             ('numpy.core.numeric', '_frombuffer'),
                             ('numpy._core.numeric', '_frombuffer'),
                             ('numpy', 'ndarray'), ('numpy', 'dtype'),
                             ('_codecs', 'encode')})


class _BatchUnpickler(pickle.Unpickler):

  def find_class(self, module, name):
    if (module, name) not in _PICKLE_GLOBALS:
      raise pickle.UnpicklingError(
          f'it refers to {module}.{name}, which no CIFAR batch holds (a '
          'crafted file?); it was not loaded')
    return super().find_class(module, name)


def _read_python(path: pathlib.Path, label_key: bytes) -> ArraySource:
  try:
    with open(path, 'rb') as f:
      batch = _BatchUnpickler(f, encoding='bytes').load()
    data = np.asarray(batch[b'data'], dtype=np.uint8)
    labels = np.asarray(batch[label_key], dtype=np.int32)
  except pickle.UnpicklingError as e:
    raise DatasetError(f'{path} is not a CIFAR python batch: {e}.') from e
  except (EOFError, KeyError, TypeError, ValueError) as e:
    raise DatasetError(f'{path} is not a CIFAR python batch: {e!r}') from e
  if data.ndim != 2 or data.shape[1] != _PIXELS:
    raise DatasetError(f'{path}: data has shape {data.shape}, expected '
                       f'(N, {_PIXELS}).')
  return ArraySource(_planar_to_nhwc(data), labels)


def _planar_to_nhwc(rows: np.ndarray) -> np.ndarray:
  return rows.reshape(-1, 3, _SIDE, _SIDE).transpose(0, 2, 3, 1)


_BATCHES = [f'data_batch_{i}' for i in range(1, 6)]
# (folder, train files, test file, reader) per format.
_FORMATS = dict(
    cifar10=[('cifar-10-batches-bin', [f'{n}.bin'
                                       for n in _BATCHES], 'test_batch.bin',
              lambda p: _read_binary(p, label_bytes=1, label_offset=0)),
             ('cifar-10-batches-py', _BATCHES, 'test_batch',
              lambda p: _read_python(p, b'labels'))],
    cifar100=[('cifar-100-binary', ['train.bin'], 'test.bin',
               lambda p: _read_binary(p, label_bytes=2, label_offset=1)),
              ('cifar-100-python', ['train'], 'test',
               lambda p: _read_python(p, b'fine_labels'))])


def _read_file(read, path: pathlib.Path) -> ArraySource:
  try:
    return read(path)
  except OSError as e:
    raise DatasetError(f'Cannot read {path}: {e.strerror or e}. Check that '
                       'the file is there and readable.') from e


def _find(name: str, data_dir: pathlib.Path):
  """The first format of `name` with a file under `data_dir`, whole, or None."""
  for folder, train_names, test_name, read in _FORMATS[name]:
    for root in (data_dir / folder, data_dir):
      names = [*train_names, test_name]
      missing = [n for n in names if not (root / n).is_file()]
      if missing and len(missing) < len(names):
        raise DatasetError(
            f'{root} lacks {", ".join(missing)} of the {name} release '
            f'({", ".join(names)}); unpack the whole release again.')
      if not missing:
        return root, [root / n for n in train_names], root / test_name, read
  return None


def _class_names(name: str, root: pathlib.Path) -> tuple[str, ...]:
  """The release's names of its classes, label i's at [i]; () if unreadable."""
  text_file, pickle_file, key = _CLASS_NAMES[name]
  with contextlib.suppress(OSError, ValueError, EOFError, LookupError,
                           TypeError, AttributeError, pickle.UnpicklingError):
    if (root / text_file).is_file():
      names = (root / text_file).read_text().split()
    else:  # pickled by the python release, its names bytes
      with open(root / pickle_file, 'rb') as f:
        meta = _BatchUnpickler(f, encoding='bytes').load()
      names = [n.decode() for n in meta[key]]
    return tuple(names) if len(names) == NUM_CLASSES[name] else ()
  return ()


def load_cifar(name: str, data_dir: pathlib.Path,
               train_per_file: int = 0) -> Dataset:
  """CIFAR-10/100 from `data_dir`; `train_per_file` > 0 keeps as many."""
  if (found := _find(name, data_dir)) is None:
    binary, python = (f[0] for f in _FORMATS[name])
    raise DatasetError(
        f'No {name} found in {data_dir} (looked for {binary}/ and {python}/ '
        f'in it, and for their files in it directly). Unpack the official '
        f'{name} release into DIR and pass --config.data_dir=DIR, or leave it '
        'unset to download it (class folders: --config.dataset=image_folder).')
  root, train_files, test_file, read = found
  train = [_read_file(read, p) for p in train_files]
  if short := [
      p.name for p, s in zip(train_files, train) if len(s) < train_per_file
  ]:
    raise DatasetError(
        f'config.train_examples_per_file={train_per_file} but {root} has '
        f'fewer in {", ".join(short)}; lower it or set it to 0 for all.')

  def joined(part: slice) -> ArraySource:
    return ArraySource(np.concatenate([s.images[part] for s in train]),
                       np.concatenate([s.labels[part] for s in train]))

  spare = joined(slice(train_per_file, None)) if train_per_file else None
  dataset = Dataset(joined(slice(train_per_file or None)),
                    _read_file(read, test_file), NUM_CLASSES[name],
                    spare=spare if spare and len(spare) else None,
                    class_names=_class_names(name, root))
  for split in (dataset.train, dataset.test):
    if split.labels.min() < 0 or split.labels.max() >= dataset.num_classes:
      raise DatasetError(f'{root}: labels outside 0..'
                         f'{dataset.num_classes - 1}; is this {name}?')
  return dataset


def open_cifar(name: str, data_dir: pathlib.Path | None,
               train_per_file: int = 0) -> Dataset:
  """`load_cifar` from `data_dir`, else from the cache, downloaded once."""
  if data_dir is None:
    data_dir = download.cache_dir()
    if not (data_dir.is_dir() and _find(name, data_dir)):
      download.fetch(name, data_dir)
  return load_cifar(name, data_dir, train_per_file)

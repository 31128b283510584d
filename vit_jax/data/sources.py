"""Datasets on disk, opened for reading by example index.

Sources (`config.dataset`):
  cifar10, cifar100   the official binary or python release under
                      `config.data_dir` or $VIT_JAX_DATA_DIR, read into memory;
  image_folder        `data_dir/{train,test}/<class>/*.{jpg,jpeg,png}`, read
                      file by file;
  tfds:NAME           a tensorflow-datasets dataset already prepared in
                      `data_dir`: by index without TensorFlow when it is in the
                      array_record format, else whole with TensorFlow
                      (`pip install -e '.[tf]'`; on-device input only).
Nothing is downloaded: a missing dataset is a `DatasetError` that says where
it looked and how to supply the data. Both inputs (`on_device`, `streaming`)
open their data through `open_dataset`.
"""

import dataclasses
import os
import pathlib
import pickle
from typing import Protocol

import numpy as np

from vit_jax.data import preprocess
from vit_jax.errors import DatasetError

DATA_DIR_ENV = 'VIT_JAX_DATA_DIR'
_CIFAR_SIDE = 32
_CIFAR_PIXELS = _CIFAR_SIDE * _CIFAR_SIDE * 3
_IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png')




class Source(Protocol):
  """Random access to a split: `source[i]` is (uint8 HxWx3 image, label)."""

  def __len__(self) -> int:
    ...

  def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
    ...


@dataclasses.dataclass(frozen=True)
class ArraySource:
  """A split held in host memory as arrays."""
  images: np.ndarray  # uint8 (N, H, W, 3)
  labels: np.ndarray  # int32 (N,)

  def __len__(self):
    return len(self.labels)

  def __getitem__(self, index):
    return self.images[index], int(self.labels[index])


@dataclasses.dataclass(frozen=True)
class FileSource:
  """Image files, decoded when read."""
  paths: list[pathlib.Path]
  labels: np.ndarray

  def __len__(self):
    return len(self.paths)

  def __getitem__(self, index):
    return read_image(self.paths[index]), int(self.labels[index])


@dataclasses.dataclass(frozen=True)
class TfdsSource:
  examples: object  # a tfds data source: len() and [i] -> feature dict

  def __len__(self):
    return len(self.examples)

  def __getitem__(self, index):
    example = self.examples[int(index)]
    image = np.asarray(example['image'], np.uint8)
    if image.ndim == 2 or image.shape[-1] == 1:  # grayscale datasets
      image = np.repeat(image.reshape(*image.shape[:2], 1), 3, axis=-1)
    return image, int(example['label'])


@dataclasses.dataclass(frozen=True)
class SubsetSource:
  """The first `count` examples of a source."""
  source: Source
  count: int

  def __len__(self):
    return self.count

  def __getitem__(self, index):
    if index >= self.count:
      raise IndexError(index)
    return self.source[index]


@dataclasses.dataclass(frozen=True)
class Dataset:
  train: Source
  test: Source
  num_classes: int


def to_arrays(source: Source, image_size: int) -> tuple[np.ndarray, np.ndarray]:
  """A whole split as (uint8 images, int32 labels). Arrays are returned as
  they are; examples read one by one are resized to `image_size` so that
  they stack."""
  if isinstance(source, ArraySource):
    return source.images, source.labels
  examples = [source[i] for i in range(len(source))]
  return (np.stack([preprocess.resize(image, image_size)
                    for image, _ in examples]),
          np.asarray([label for _, label in examples], np.int32))


# --------------------------------------------------------------- CIFAR -----


def _cifar_records(path: pathlib.Path, label_bytes: int,
                   label_offset: int) -> ArraySource:
  raw = np.fromfile(path, dtype=np.uint8)
  record = label_bytes + _CIFAR_PIXELS
  if raw.size == 0 or raw.size % record:
    raise DatasetError(
        f'{path} is not a CIFAR binary file: {raw.size} bytes is not a '
        f'multiple of the {record}-byte record.')
  raw = raw.reshape(-1, record)
  return ArraySource(_planar_to_nhwc(raw[:, label_bytes:]),
                     raw[:, label_offset].astype(np.int32))


# What the official CIFAR python batches hold (dicts of bytes, lists, ints and
# numpy arrays, pickled by Python 2 or 3, numpy 1 or 2): nothing else is
# unpickled, so a crafted file cannot run code.
_CIFAR_PICKLE_GLOBALS = frozenset({
    ('numpy.core.multiarray', '_reconstruct'),
    ('numpy._core.multiarray', '_reconstruct'),
    ('numpy.core.numeric', '_frombuffer'),
    ('numpy._core.numeric', '_frombuffer'),
    ('numpy', 'ndarray'),
    ('numpy', 'dtype'),
    ('_codecs', 'encode'),
})


class _CifarUnpickler(pickle.Unpickler):

  def find_class(self, module, name):
    if (module, name) not in _CIFAR_PICKLE_GLOBALS:
      raise pickle.UnpicklingError(
          f'it refers to {module}.{name}, which no CIFAR batch holds (a '
          'crafted file?); it was not loaded')
    return super().find_class(module, name)


def _cifar_pickle(path: pathlib.Path, label_key: bytes) -> ArraySource:
  try:
    with open(path, 'rb') as f:
      batch = _CifarUnpickler(f, encoding='bytes').load()
    data = np.asarray(batch[b'data'], dtype=np.uint8)
    labels = np.asarray(batch[label_key], dtype=np.int32)
  except pickle.UnpicklingError as e:
    raise DatasetError(f'{path} is not a CIFAR python batch: {e}.') from e
  except (EOFError, KeyError, TypeError, ValueError) as e:
    raise DatasetError(f'{path} is not a CIFAR python batch: {e!r}') from e
  if data.ndim != 2 or data.shape[1] != _CIFAR_PIXELS:
    raise DatasetError(f'{path}: data has shape {data.shape}, expected '
                       f'(N, {_CIFAR_PIXELS}).')
  return ArraySource(_planar_to_nhwc(data), labels)


def _planar_to_nhwc(rows: np.ndarray) -> np.ndarray:
  return rows.reshape(-1, 3, _CIFAR_SIDE, _CIFAR_SIDE).transpose(0, 2, 3, 1)


def _concatenate(splits: list[ArraySource]) -> ArraySource:
  return ArraySource(np.concatenate([s.images for s in splits]),
                     np.concatenate([s.labels for s in splits]))


# (folder, train files, test file, reader) per format; the first folder found
# under the data directory (or the data directory itself) is used.
_CIFAR_FORMATS = {
    'cifar10': [
        ('cifar-10-batches-bin', 'data_batch_*.bin', 'test_batch.bin',
         lambda p: _cifar_records(p, label_bytes=1, label_offset=0)),
        ('cifar-10-batches-py', 'data_batch_[0-9]', 'test_batch',
         lambda p: _cifar_pickle(p, b'labels')),
    ],
    'cifar100': [
        ('cifar-100-binary', 'train.bin', 'test.bin',
         lambda p: _cifar_records(p, label_bytes=2, label_offset=1)),
        ('cifar-100-python', 'train', 'test',
         lambda p: _cifar_pickle(p, b'fine_labels')),
    ],
}
_CIFAR_CLASSES = {'cifar10': 10, 'cifar100': 100}


def _read(read, path: pathlib.Path) -> ArraySource:
  try:
    return read(path)
  except OSError as e:
    raise DatasetError(f'Cannot read {path}: {e.strerror or e}. Check that '
                       'the file is there and readable.') from e


def _find_cifar(name: str, data_dir: pathlib.Path):
  """(root, train files, test file, reader) of the first official format of
  `name` under `data_dir`, or None."""
  for folder, train_pattern, test_file, read in _CIFAR_FORMATS[name]:
    for root in (data_dir / folder, data_dir):
      train_files = sorted(root.glob(train_pattern))
      if train_files and (root / test_file).is_file():
        return root, train_files, root / test_file, read
  return None


def load_cifar(name: str, data_dir: pathlib.Path,
               train_per_file: int = 0) -> Dataset:
  """CIFAR-10/100 from either official format under `data_dir`;
  `train_per_file`: only the first that many images of each training file
  (0: all)."""
  found = _find_cifar(name, data_dir)
  if found is None:
    binary, python = (f[0] for f in _CIFAR_FORMATS[name])
    raise DatasetError(
        f'No {name} found in {data_dir} (looked for {binary}/ and {python}/ '
        f'in it, and for their files in it directly). Unpack the official '
        f'{name} release (binary or python version) into a directory and '
        f'pass --config.data_dir=DIR, or leave data_dir unset to download it.')
  root, train_files, test_file, read = found
  train = [_read(read, p) for p in train_files]
  if train_per_file:
    short = [p.name for p, s in zip(train_files, train)
             if len(s) < train_per_file]
    if short:
      raise DatasetError(
          f'config.train_examples_per_file={train_per_file} but {root} has '
          f'fewer in {", ".join(short)}; lower it or set it to 0 for all.')
    train = [ArraySource(s.images[:train_per_file], s.labels[:train_per_file])
             for s in train]
  dataset = Dataset(train=_concatenate(train), test=_read(read, test_file),
                    num_classes=_CIFAR_CLASSES[name])
  for split in (dataset.train, dataset.test):
    if split.labels.min() < 0 or split.labels.max() >= dataset.num_classes:
      raise DatasetError(f'{root}: labels outside 0..'
                         f'{dataset.num_classes - 1}; is this {name}?')
  return dataset


def _cifar(config) -> Dataset:
  """From config.data_dir when given, else from the download cache
  ($VIT_JAX_DATA_DIR or ~/.cache/vit_jax), downloading the official binary
  release there the first time."""
  from vit_jax.data import download  # pylint: disable=g-import-not-at-top
  name, per_file = config.dataset, config.train_examples_per_file
  if config.data_dir:
    return load_cifar(name, local_data_dir(config), per_file)
  cache = download.cache_dir()
  if not (cache.is_dir() and _find_cifar(name, cache)):
    download.fetch(name, cache)
  return load_cifar(name, cache, per_file)


# -------------------------------------------------------- image folders ----


def read_image(path: pathlib.Path) -> np.ndarray:
  """An image file as uint8 RGB."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  try:
    with Image.open(path) as image:
      return np.asarray(image.convert('RGB'), dtype=np.uint8)
  except OSError as e:
    raise DatasetError(f'Cannot read image {path}: {e}') from e


def image_folder(data_dir: pathlib.Path) -> Dataset:
  """The image files under `data_dir/{train,test}/<class>/`, labelled by the
  index of their class folder among the sorted training classes."""
  train_dir = data_dir / 'train'
  class_names = sorted(p.name for p in train_dir.iterdir()
                       if p.is_dir()) if train_dir.is_dir() else []
  if not class_names or not (data_dir / 'test').is_dir():
    raise DatasetError(
        f'No image folder found in {data_dir}: expected '
        f'{data_dir}/train/<class>/*.jpg and {data_dir}/test/<class>/*.jpg.')

  def list_split(split: str) -> FileSource:
    paths, labels = [], []
    for folder in sorted((data_dir / split).iterdir()):
      if not folder.is_dir():
        continue
      if folder.name not in class_names:
        raise DatasetError(f'{folder}: class {folder.name!r} is not among the '
                           f'training classes {class_names}.')
      for path in sorted(folder.iterdir()):
        if path.suffix.lower() in _IMAGE_SUFFIXES:
          paths.append(path)
          labels.append(class_names.index(folder.name))
    if not paths:
      raise DatasetError(f'No .jpg/.jpeg/.png images under {data_dir / split}.')
    return FileSource(paths, np.asarray(labels, np.int32))

  return Dataset(list_split('train'), list_split('test'), len(class_names))


# ------------------------------------------------ tensorflow-datasets ------


def tfds_builder(name: str, data_dir: pathlib.Path | None):
  """The builder of a prepared tensorflow-datasets image-classification
  dataset; never downloads."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  try:
    builder = tfds.builder(name, data_dir=data_dir and str(data_dir))
  except tfds.core.registered.DatasetNotFoundError as e:
    raise DatasetError(f'tensorflow-datasets has no dataset {name!r}.') from e
  if not builder.is_prepared():
    raise DatasetError(
        f'tfds:{name} is not prepared in {builder.data_dir}; this job does not '
        'download. Prepare it where there is network (tfds build '
        f'{name} --file_format=array_record --data_dir=DIR) and pass '
        '--config.data_dir=DIR.')
  features = builder.info.features
  if 'image' not in features or 'label' not in features:
    raise DatasetError(f'tfds:{name} has features {list(features)}; image '
                       "classification needs 'image' and 'label'.")
  return builder


def _tfds_whole(builder, name: str, train_split: str,
                test_split: str) -> Dataset:
  """A tfrecord-format dataset of same-size images, read whole with
  TensorFlow."""
  if None in builder.info.features['image'].shape[:2]:
    raise DatasetError(
        f'tfds:{name} has images of varying size, which cannot be read whole '
        'from the tfrecord format: convert it to array_record (tfds '
        f'convert_format --root_data_dir={builder.data_dir} '
        "--out_file_format=array_record) or set config.input_pipeline="
        "'streaming'.")
  try:
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    raise DatasetError(
        f'tfds:{name} is in the tfrecord format, which only TensorFlow reads: '
        "pip install -e '.[tf]', or convert it to array_record (tfds "
        f'convert_format --root_data_dir={builder.data_dir} '
        '--out_file_format=array_record), which is read without it.') from e
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  def read_split(split: str) -> ArraySource:
    data = tfds.as_numpy(builder.as_dataset(split=split, batch_size=-1))
    return ArraySource(np.asarray(data['image'], np.uint8),
                       np.asarray(data['label'], np.int32))

  return Dataset(read_split(train_split), read_split(test_split),
                 builder.info.features['label'].num_classes)


def open_tfds(name: str, data_dir: pathlib.Path | None, train_split: str,
              test_split: str, whole: bool) -> Dataset:
  """By index (array_record format); failing that, whole with TensorFlow
  when the input holds the whole dataset anyway."""
  builder = tfds_builder(name, data_dir)
  try:
    train, test = (builder.as_data_source(split=s)
                   for s in (train_split, test_split))
  except (NotImplementedError, ValueError) as e:
    if whole:
      return _tfds_whole(builder, name, train_split, test_split)
    raise DatasetError(
        f'tfds:{name} in {builder.data_dir} cannot be read by index ({e}). '
        'Streaming reads the array_record format: convert the prepared '
        f'dataset (tfds convert_format --root_data_dir={builder.data_dir} '
        '--out_file_format=array_record) or rebuild it with '
        '--file_format=array_record.') from e
  return Dataset(TfdsSource(train), TfdsSource(test),
                 builder.info.features['label'].num_classes)


# -------------------------------------------------------------- dispatch ---


def first(source: Source, count: int, what: str) -> Source:
  """The first `count` examples (0: all): deterministic, in the source's
  order."""
  if not count or count == len(source):
    return source
  if count > len(source):
    raise DatasetError(f'config.{what}={count} but the dataset has only '
                       f'{len(source)}; lower it or set it to 0 for all.')
  if isinstance(source, ArraySource):
    return ArraySource(source.images[:count], source.labels[:count])
  return SubsetSource(source, count)


def data_dir(config) -> pathlib.Path | None:
  """config.data_dir, else $VIT_JAX_DATA_DIR, else None."""
  directory = config.data_dir or os.environ.get(DATA_DIR_ENV)
  return pathlib.Path(directory).expanduser() if directory else None


def local_data_dir(config) -> pathlib.Path:
  """`data_dir(config)` for datasets read from a local directory: raises
  DatasetError when it is unset or missing."""
  directory = data_dir(config)
  if directory is None:
    raise DatasetError(
        f'{config.dataset} is read from a local directory: pass '
        f'--config.data_dir=DIR or set ${DATA_DIR_ENV}=DIR.')
  if directory.exists() and not directory.is_dir():
    raise DatasetError(f'The data directory {directory} is a file: pass the '
                       'directory that holds the dataset.')
  if not directory.is_dir():
    raise DatasetError(f'The data directory {directory} does not exist.')
  if not os.access(directory, os.R_OK | os.X_OK):
    raise DatasetError(f'The data directory {directory} cannot be read '
                       '(permission denied); check its permissions.')
  return directory


def open_dataset(config, whole: bool = False) -> Dataset:
  """The dataset `config` names, cut to the requested sizes. `whole`: the
  caller reads every example into memory (the on-device input), which lets
  tfrecord-format tfds datasets be read with TensorFlow."""
  name = config.dataset
  if name in _CIFAR_FORMATS:
    dataset = _cifar(config)
  elif name == 'image_folder':
    dataset = image_folder(local_data_dir(config))
  elif name.startswith('tfds:'):
    dataset = open_tfds(name[len('tfds:'):], data_dir(config),
                        config.train_split, config.test_split, whole)
  else:
    raise DatasetError(
        f'Unknown dataset {name!r}: use cifar10, cifar100, image_folder or '
        'tfds:NAME.')
  return Dataset(
      train=first(dataset.train, config.train_examples, 'train_examples'),
      test=first(dataset.test, config.test_examples, 'test_examples'),
      num_classes=dataset.num_classes)

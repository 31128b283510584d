"""Where data enters: datasets read into uint8 arrays on the host, placed on
the devices once, and batched, augmented and normalised there.

Sources (`config.dataset`):
  cifar10, cifar100   the official binary or python release under
                      `config.data_dir` or $VIT_JAX_DATA_DIR;
  image_folder        `data_dir/{train,test}/<class>/*.{jpg,jpeg,png}`;
  tfds:NAME           any tensorflow-datasets dataset already prepared in
                      `data_dir` (needs TensorFlow: `pip install -e '.[tf]'`).
Nothing is downloaded: a missing dataset is a `DatasetError` that says where
it looked and how to supply the data.

The dataset is copied to every device once (`OnDeviceInput`), which suits
small datasets; `vit_jax.streaming` reads large ones batch by batch instead.

Several processes (multi-host): every process reads the whole dataset and
places it on its own devices, and every process builds the same seeded batch
indices (`epoch_batches`, `eval_batches`), so together they hold one global,
replicated copy of the data and of each global batch's indices. Inside the
compiled step each device gathers only its shard of the batch (see `train`);
no process loads or sends another's examples.
"""

import dataclasses
import os
import pathlib
import pickle
from typing import Any
import zlib

import jax
import jax.numpy as jnp
import numpy as np

DATA_DIR_ENV = 'VIT_JAX_DATA_DIR'
_CIFAR_SIDE = 32
_CIFAR_PIXELS = _CIFAR_SIDE * _CIFAR_SIDE * 3
_IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png')


class DatasetError(ValueError):
  """The dataset is missing, malformed or misconfigured."""


@dataclasses.dataclass(frozen=True)
class Split:
  images: Any  # uint8 (N, H, W, 3), numpy on the host or a jax.Array
  labels: Any  # int32 (N,)

  def __len__(self):
    return len(self.labels)


@dataclasses.dataclass(frozen=True)
class Dataset:
  train: Split
  test: Split
  num_classes: int


# --------------------------------------------------------------- reading ---


def _cifar_records(path: pathlib.Path, label_bytes: int,
                   label_offset: int) -> Split:
  raw = np.fromfile(path, dtype=np.uint8)
  record = label_bytes + _CIFAR_PIXELS
  if raw.size == 0 or raw.size % record:
    raise DatasetError(
        f'{path} is not a CIFAR binary file: {raw.size} bytes is not a '
        f'multiple of the {record}-byte record.')
  raw = raw.reshape(-1, record)
  return Split(_planar_to_nhwc(raw[:, label_bytes:]),
               raw[:, label_offset].astype(np.int32))


def _cifar_pickle(path: pathlib.Path, label_key: bytes) -> Split:
  try:
    with open(path, 'rb') as f:
      batch = pickle.load(f, encoding='bytes')
    data = np.asarray(batch[b'data'], dtype=np.uint8)
    labels = np.asarray(batch[label_key], dtype=np.int32)
  except (pickle.UnpicklingError, EOFError, KeyError, TypeError,
          ValueError) as e:
    raise DatasetError(f'{path} is not a CIFAR python batch: {e!r}') from e
  if data.ndim != 2 or data.shape[1] != _CIFAR_PIXELS:
    raise DatasetError(f'{path}: data has shape {data.shape}, expected '
                       f'(N, {_CIFAR_PIXELS}).')
  return Split(_planar_to_nhwc(data), labels)


def _planar_to_nhwc(rows: np.ndarray) -> np.ndarray:
  return rows.reshape(-1, 3, _CIFAR_SIDE, _CIFAR_SIDE).transpose(0, 2, 3, 1)


def _concatenate(splits: list[Split]) -> Split:
  return Split(np.concatenate([s.images for s in splits]),
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


def load_cifar(name: str, data_dir: pathlib.Path) -> Dataset:
  """CIFAR-10/100 from either official format under `data_dir`."""
  for folder, train_pattern, test_file, read in _CIFAR_FORMATS[name]:
    for root in (data_dir / folder, data_dir):
      train_files = sorted(root.glob(train_pattern))
      if train_files and (root / test_file).is_file():
        dataset = Dataset(
            train=_concatenate([read(p) for p in train_files]),
            test=read(root / test_file),
            num_classes=_CIFAR_CLASSES[name])
        for split in (dataset.train, dataset.test):
          if split.labels.min() < 0 or split.labels.max() >= dataset.num_classes:
            raise DatasetError(
                f'{root}: labels outside 0..{dataset.num_classes - 1}; is '
                f'this {name}?')
        return dataset
  binary, python = (f[0] for f in _CIFAR_FORMATS[name])
  raise DatasetError(
      f'No {name} found in {data_dir} (looked for {binary}/ and {python}/ '
      f'in it, and for their files in it directly). Unpack the official '
      f'{name} release (binary or python version) into a directory and pass '
      f'--config.data_dir=DIR or set ${DATA_DIR_ENV}=DIR.')


def read_image(path: pathlib.Path, size: int | None = None) -> np.ndarray:
  """An image file as uint8 RGB, resized to size x size if `size` is given."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  try:
    with Image.open(path) as image:
      image = image.convert('RGB')
      if size and image.size != (size, size):
        image = image.resize((size, size), Image.BILINEAR)
      return np.asarray(image, dtype=np.uint8)
  except OSError as e:
    raise DatasetError(f'Cannot read image {path}: {e}') from e


@dataclasses.dataclass(frozen=True)
class ImageFolderFiles:
  train: tuple[list[pathlib.Path], np.ndarray]  # (paths, int32 labels)
  test: tuple[list[pathlib.Path], np.ndarray]
  class_names: list[str]


def image_folder_files(data_dir: pathlib.Path) -> ImageFolderFiles:
  """The image files under `data_dir/{train,test}/<class>/` and their
  labels: the index of the class folder among the sorted training classes."""
  train_dir = data_dir / 'train'
  class_names = sorted(p.name for p in train_dir.iterdir()
                       if p.is_dir()) if train_dir.is_dir() else []
  if not class_names or not (data_dir / 'test').is_dir():
    raise DatasetError(
        f'No image folder found in {data_dir}: expected '
        f'{data_dir}/train/<class>/*.jpg and {data_dir}/test/<class>/*.jpg.')

  def list_split(split: str):
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
    return paths, np.asarray(labels, np.int32)

  return ImageFolderFiles(list_split('train'), list_split('test'), class_names)


def load_image_folder(data_dir: pathlib.Path, image_size: int) -> Dataset:
  """`data_dir/{train,test}/<class>/*` images, resized to `image_size`."""
  files = image_folder_files(data_dir)

  def read_split(paths, labels) -> Split:
    return Split(np.stack([read_image(p, image_size) for p in paths]), labels)

  return Dataset(read_split(*files.train), read_split(*files.test),
                 len(files.class_names))


def tfds_builder(name: str, data_dir: pathlib.Path | None,
                 build_flags: str = ''):
  """The builder of a prepared tensorflow-datasets image-classification
  dataset; never downloads. `build_flags` are suggested for `tfds build`."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  try:
    builder = tfds.builder(name, data_dir=data_dir and str(data_dir))
  except tfds.core.registered.DatasetNotFoundError as e:
    raise DatasetError(f'tensorflow-datasets has no dataset {name!r}.') from e
  if not builder.is_prepared():
    raise DatasetError(
        f'tfds:{name} is not prepared in {builder.data_dir}; this job does not '
        'download. Prepare it where there is network (tfds build '
        f'{name}{build_flags} --data_dir=DIR) and pass --config.data_dir=DIR.')
  features = builder.info.features
  if 'image' not in features or 'label' not in features:
    raise DatasetError(f'tfds:{name} has features {list(features)}; image '
                       "classification needs 'image' and 'label'.")
  return builder


def load_tfds(name: str, data_dir: pathlib.Path | None, train_split: str,
              test_split: str) -> Dataset:
  """A prepared tensorflow-datasets dataset of same-size images, read whole
  with TensorFlow."""
  builder = tfds_builder(name, data_dir)
  features = builder.info.features
  if None in features['image'].shape[:2]:
    raise DatasetError(
        f'tfds:{name} has images of varying size, which cannot be held as one '
        "array on the devices: set config.input_pipeline='streaming'.")
  try:
    import tensorflow  # pylint: disable=g-import-not-at-top,unused-import
  except ImportError as e:
    raise DatasetError(
        f'tfds:{name} is read whole with TensorFlow, which is optional: pip '
        "install -e '.[tf]', or set config.input_pipeline='streaming' to read "
        'it by index without TensorFlow (array_record format).') from e
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  def read_split(split: str) -> Split:
    data = tfds.as_numpy(builder.as_dataset(split=split, batch_size=-1))
    return Split(np.asarray(data['image'], np.uint8),
                 np.asarray(data['label'], np.int32))

  return Dataset(read_split(train_split), read_split(test_split),
                 features['label'].num_classes)


def _first(split: Split, count: int, what: str) -> Split:
  """The first `count` examples: deterministic, in the source's order."""
  if not count:
    return split
  if count > len(split):
    raise DatasetError(f'config.{what}={count} but the dataset has only '
                       f'{len(split)}; lower it or set it to 0 for all.')
  return Split(split.images[:count], split.labels[:count])


def data_dir(config) -> pathlib.Path | None:
  """config.data_dir, else $VIT_JAX_DATA_DIR, else None."""
  directory = config.get('data_dir') or os.environ.get(DATA_DIR_ENV)
  return pathlib.Path(directory).expanduser() if directory else None


def local_data_dir(config) -> pathlib.Path:
  """`data_dir(config)` for datasets read from a local directory: raises
  DatasetError when it is unset or missing."""
  directory = data_dir(config)
  if directory is None:
    raise DatasetError(
        f'{config.dataset} is read from a local directory: pass '
        f'--config.data_dir=DIR or set ${DATA_DIR_ENV}=DIR.')
  if not directory.is_dir():
    raise DatasetError(f'Data directory {directory} does not exist.')
  return directory


def load_dataset(config) -> Dataset:
  """The dataset `config` names, as host arrays, cut to the requested sizes."""
  name = config.dataset
  directory = data_dir(config)
  if name in _CIFAR_FORMATS or name == 'image_folder':
    directory = local_data_dir(config)
  if name in _CIFAR_FORMATS:
    dataset = load_cifar(name, directory)
  elif name == 'image_folder':
    dataset = load_image_folder(directory, config.image_size)
  elif name.startswith('tfds:'):
    dataset = load_tfds(name[len('tfds:'):], directory, config.train_split,
                        config.test_split)
  else:
    raise DatasetError(
        f'Unknown dataset {name!r}: use cifar10, cifar100, image_folder or '
        'tfds:NAME.')
  return Dataset(
      train=_first(dataset.train, config.train_examples, 'train_examples'),
      test=_first(dataset.test, config.test_examples, 'test_examples'),
      num_classes=dataset.num_classes)


# ------------------------------------------------------------ on device ---


def replicate(array: np.ndarray, sharding: jax.sharding.Sharding) -> jax.Array:
  """A global array from host data that every process holds identically.

  Each process fills only its own devices, so `sharding` may span several
  processes (`jax.device_put` would also compare the data across processes
  first, moving all of it over the network).
  """
  array = np.asarray(array)
  return jax.make_array_from_callback(array.shape, sharding,
                                      lambda index: array[index])


class OnDeviceInput:
  """The whole dataset on every device, copied once; each step gets a batch
  of example indices and gathers the examples where it runs.

  Every process has read the same dataset, so the copy needs no
  communication, and builds the same seeded indices.
  """

  def __init__(self, dataset: Dataset, config, mesh: jax.sharding.Mesh):
    self.dataset = dataset
    self.num_classes = dataset.num_classes
    self.train_size, self.test_size = len(dataset.train), len(dataset.test)
    self._config = config
    self._replicated = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec())
    self.train_data, self.test_data = (
        (replicate(split.images, self._replicated),
         replicate(split.labels, self._replicated))
        for split in (dataset.train, dataset.test))
    self._eval_indices, self._eval_masks = (
        replicate(a, self._replicated)
        for a in eval_batches(self.test_size, config.eval_batch_size))

  def fingerprint(self) -> list[np.ndarray]:
    """What every process must agree on: the examples and the shuffle."""
    return [
        self.dataset.train.images, self.dataset.train.labels,
        self.dataset.test.images, self.dataset.test.labels,
        epoch_batches(self._config.seed, 1, self.train_size,
                      self._config.batch_size)
    ]

  def batch_specs(self):
    """Shapes of one train batch, one eval batch and its mask, for compiling:
    rows of the replicated index tables."""
    spec = lambda shape, dtype: jax.ShapeDtypeStruct(
        shape, dtype, sharding=self._replicated)
    return (spec((self._config.batch_size,), jnp.int32),
            spec((self._config.eval_batch_size,), jnp.int32),
            spec((self._config.eval_batch_size,), jnp.float32))

  def train_batches(self, epoch: int):
    table = replicate(
        epoch_batches(self._config.seed, epoch, self.train_size,
                      self._config.batch_size), self._replicated)
    for step in range(table.shape[0]):
      yield table[step]

  def eval_batches(self):
    return zip(self._eval_indices, self._eval_masks)


def _checksum(array) -> int:
  array = np.ascontiguousarray(array)
  crc = zlib.crc32(repr((array.shape, array.dtype.str)).encode())
  return zlib.crc32(memoryview(array).cast('B'), crc)


def check_same_on_every_process(fingerprint: list[np.ndarray]):
  """Raises DatasetError unless every process of a multi-process job holds
  the same `fingerprint` (an input's: its examples or sizes, and the
  shuffle), since each device takes its shard of a batch from its own
  process, so a difference would silently mix datasets. Exchanges one
  checksum per array; a no-op in a single process."""
  if jax.process_count() == 1:
    return
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  local = np.array([_checksum(a) for a in fingerprint], np.uint32)
  every = np.asarray(multihost_utils.process_allgather(local))
  differ = [i for i in range(len(every)) if (every[i] != every[0]).any()]
  if differ:
    raise DatasetError(
        f'Process(es) {differ} read a different dataset, or shuffle it '
        'differently, than process 0: give every process the same data '
        '(config.data_dir on a shared filesystem or identical copies) and the '
        'same numpy version.')


def epoch_batches(seed: int, epoch: int, num_examples: int,
                  batch_size: int) -> np.ndarray:
  """(steps, batch_size) example indices: a fresh shuffle each epoch, the
  remainder dropped. The same on every process and on resumption."""
  order = np.random.default_rng([seed, epoch]).permutation(num_examples)
  steps = num_examples // batch_size
  return order[:steps * batch_size].reshape(steps, batch_size).astype(np.int32)


def eval_batches(num_examples: int,
                 batch_size: int) -> tuple[np.ndarray, np.ndarray]:
  """Indices and a 0/1 mask covering every example exactly once; the last
  batch is padded (with example 0, masked out)."""
  steps = -(-num_examples // batch_size)
  indices = np.arange(steps * batch_size, dtype=np.int32)
  mask = indices < num_examples
  indices = np.where(mask, indices, 0)
  return (indices.reshape(steps, batch_size),
          mask.reshape(steps, batch_size).astype(np.float32))


def random_crop_and_flip(key: jax.Array, images: jax.Array,
                         padding: int = 4) -> jax.Array:
  """Per image: zero-pad by `padding`, crop back at a random offset, flip
  left-right with probability 1/2 (torchvision's RandomCrop + RandomFlip)."""
  n, h, w, _ = images.shape
  crop_key, flip_key = jax.random.split(key)
  offsets = jax.random.randint(crop_key, (n, 2), 0, 2 * padding + 1)
  flips = jax.random.bernoulli(flip_key, 0.5, (n,))
  padded = jnp.pad(images, ((0, 0), (padding, padding), (padding, padding),
                            (0, 0)))

  def crop(image, offset, flip):
    image = jax.lax.dynamic_slice(image, (offset[0], offset[1], 0),
                                  (h, w, image.shape[-1]))
    return jnp.where(flip, image[:, ::-1], image)

  return jax.vmap(crop)(padded, offsets, flips)


def preprocess(images: jax.Array, *, key: jax.Array | None, augment: bool,
               image_size: int, mean, std) -> jax.Array:
  """uint8 NHWC -> float32 in [0, 1], augmented, resized, normalised."""
  x = images.astype(jnp.float32) / 255.0
  if augment:
    x = random_crop_and_flip(key, x)
  if x.shape[1:3] != (image_size, image_size):
    x = jax.image.resize(x, (x.shape[0], image_size, image_size, x.shape[3]),
                         method='bilinear')
  return (x - jnp.asarray(mean)) / jnp.asarray(std)

"""Streaming input, for datasets that do not fit in device memory (ImageNet):
examples are read, cropped and resized on the host for every step, and each
process reads only the examples its own devices compute on.

`config.input_pipeline = 'streaming'` selects it; the default, 'on_device'
(`input_pipeline`), copies a small dataset to every device once and is faster
for CIFAR-sized data. Both draw the same seeded global batches
(`input_pipeline.epoch_batches`, `eval_batches`).

Preprocessing is the official fine-tuning code's: for training an Inception
crop (5-100% of the area, aspect ratio 3/4-4/3) resized to
`config.image_size`, plus a horizontal flip (`config.augment`); for
evaluation the whole image resized to `config.image_size`. Each example's
randomness comes from (seed, epoch, step, position in the global batch), so a
batch is the same however many processes and threads load it.

Sources (`config.dataset`), read lazily by index:
  cifar10, cifar100   held in host memory (small);
  image_folder        `data_dir/{train,test}/<class>/*` files;
  tfds:NAME           `tfds.data_source`: a dataset prepared in the
                      array_record format, read without TensorFlow.
"""

import collections
import concurrent.futures
import dataclasses
import math
import os
import pathlib
from typing import Iterator, Protocol

from absl import logging
import jax
import numpy as np

from vit_jax import input_pipeline
from vit_jax.input_pipeline import DatasetError

_INCEPTION_AREA = (0.05, 1.0)
_INCEPTION_ASPECT = (3 / 4, 4 / 3)
_CROP_ATTEMPTS = 10


class Source(Protocol):
  """Random access to a split: `source[i]` is (uint8 HxWx3 image, label)."""

  def __len__(self) -> int:
    ...

  def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
    ...


@dataclasses.dataclass(frozen=True)
class ArraySource:
  split: input_pipeline.Split

  def __len__(self):
    return len(self.split)

  def __getitem__(self, index):
    return self.split.images[index], int(self.split.labels[index])


@dataclasses.dataclass(frozen=True)
class FileSource:
  paths: list[pathlib.Path]
  labels: np.ndarray

  def __len__(self):
    return len(self.paths)

  def __getitem__(self, index):
    return input_pipeline.read_image(self.paths[index]), int(
        self.labels[index])


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
class StreamingDataset:
  train: Source
  test: Source
  num_classes: int


def _tfds_sources(name: str, data_dir: pathlib.Path | None, train_split: str,
                  test_split: str) -> StreamingDataset:
  builder = input_pipeline.tfds_builder(name, data_dir,
                                        ' --file_format=array_record')
  try:
    train, test = (builder.as_data_source(split=s)
                   for s in (train_split, test_split))
  except (NotImplementedError, ValueError) as e:
    raise DatasetError(
        f'tfds:{name} in {builder.data_dir} cannot be read by index ({e}). '
        'Streaming reads the array_record format: convert the prepared '
        f'dataset (tfds convert_format --root_data_dir={builder.data_dir} '
        '--out_file_format=array_record) or rebuild it with '
        '--file_format=array_record.') from e
  return StreamingDataset(TfdsSource(train), TfdsSource(test),
                          builder.info.features['label'].num_classes)


def open_dataset(config) -> StreamingDataset:
  """The dataset `config` names, opened for reading by index."""
  name = config.dataset
  if name.startswith('tfds:'):
    dataset = _tfds_sources(name[len('tfds:'):],
                            input_pipeline.data_dir(config),
                            config.train_split, config.test_split)
  elif name == 'image_folder':
    files = input_pipeline.image_folder_files(
        input_pipeline.local_data_dir(config))
    dataset = StreamingDataset(
        FileSource(*files.train), FileSource(*files.test),
        len(files.class_names))
  else:
    in_memory = input_pipeline.load_dataset(config)
    dataset = StreamingDataset(ArraySource(in_memory.train),
                               ArraySource(in_memory.test),
                               in_memory.num_classes)
  return StreamingDataset(
      _first(dataset.train, config.train_examples, 'train_examples'),
      _first(dataset.test, config.test_examples, 'test_examples'),
      dataset.num_classes)


def _first(source: Source, count: int, what: str) -> Source:
  if not count or count == len(source):
    return source
  if count > len(source):
    raise DatasetError(f'config.{what}={count} but the dataset has only '
                       f'{len(source)}; lower it or set it to 0 for all.')
  return SubsetSource(source, count)


# ----------------------------------------------------- host preprocessing ---


def resize(image: np.ndarray, size: int) -> np.ndarray:
  """Bilinear resize of a uint8 HxWx3 image to size x size."""
  if image.shape[:2] == (size, size):
    return image
  from PIL import Image  # pylint: disable=g-import-not-at-top
  return np.asarray(
      Image.fromarray(image).resize((size, size), Image.BILINEAR), np.uint8)


def inception_crop_box(height: int, width: int,
                       rng: np.random.Generator) -> tuple[int, int, int, int]:
  """(top, left, crop height, crop width): a random crop of 5-100% of the
  area with aspect ratio in [3/4, 4/3] (`tf.image.sample_distorted_bounding_box`
  as the official code calls it); the whole image when no draw fits."""
  for _ in range(_CROP_ATTEMPTS):
    area = rng.uniform(*_INCEPTION_AREA) * height * width
    aspect = math.exp(rng.uniform(*np.log(_INCEPTION_ASPECT)))
    crop_width = round(math.sqrt(area * aspect))
    crop_height = round(math.sqrt(area / aspect))
    if 0 < crop_height <= height and 0 < crop_width <= width:
      return (int(rng.integers(0, height - crop_height + 1)),
              int(rng.integers(0, width - crop_width + 1)), crop_height,
              crop_width)
  return 0, 0, height, width


def train_image(image: np.ndarray, size: int, augment: bool,
                rng: np.random.Generator) -> np.ndarray:
  if not augment:
    return resize(image, size)
  top, left, height, width = inception_crop_box(*image.shape[:2], rng)
  image = resize(image[top:top + height, left:left + width], size)
  return image[:, ::-1] if rng.random() < 0.5 else image


# ---------------------------------------------------------------- batches ---


def process_rows(sharding: jax.sharding.Sharding, batch_size: int) -> slice:
  """The rows of a global batch that live on this process's devices."""
  spans = sorted({
      (index[0].start or 0,
       batch_size if index[0].stop is None else index[0].stop)
      for index in sharding.addressable_devices_indices_map(
          (batch_size,)).values()
  })
  if any(stop != start for (_, stop), (start, _) in zip(spans, spans[1:])):
    raise ValueError(f'The batch rows of process {jax.process_index()} are '
                     f'not contiguous: {spans}.')
  return slice(spans[0][0], spans[-1][1])


class StreamingInput:
  """Global batches as sharded jax.Arrays; this process loads only its rows,
  on `threads` threads, `prefetch` steps ahead of the one being computed.

  Same interface as `input_pipeline.OnDeviceInput`; the steps get the
  examples themselves, so `train_data` and `test_data` are None.
  """
  train_data = test_data = None

  def __init__(self, dataset: StreamingDataset, config, mesh,
               threads: int | None = None, prefetch: int = 2):
    self.dataset = dataset
    self.num_classes = dataset.num_classes
    self.train_size, self.test_size = len(dataset.train), len(dataset.test)
    self._config = config
    self._sharding = jax.sharding.NamedSharding(
        mesh, jax.sharding.PartitionSpec('data'))
    self.threads = threads or config.get('input_threads', 0) or os.cpu_count()
    self._prefetch = prefetch
    self._train_rows = process_rows(self._sharding, config.batch_size)
    self._eval_rows = process_rows(self._sharding, config.eval_batch_size)
    logging.info('Streaming %d train / %d test examples; this process reads '
                 'rows %d:%d of every training batch of %d.', self.train_size,
                 self.test_size, self._train_rows.start, self._train_rows.stop,
                 config.batch_size)

  def fingerprint(self) -> list[np.ndarray]:
    """What every process must agree on: the split sizes, the first example
    of each split (reading all would take an epoch) and the shuffle."""
    (first_train, train_label), (first_test, test_label) = (
        self.dataset.train[0], self.dataset.test[0])
    return [
        np.array([self.train_size, self.test_size, self.num_classes,
                  train_label, test_label]), first_train, first_test,
        input_pipeline.epoch_batches(self._config.seed, 1, self.train_size,
                                     self._config.batch_size)
    ]

  def batch_specs(self):
    """Shapes of one train batch, one eval batch and its mask, for compiling."""
    size = self._config.image_size

    def spec(batch_size):
      return (jax.ShapeDtypeStruct((batch_size, size, size, 3), np.uint8,
                                   sharding=self._sharding),
              jax.ShapeDtypeStruct((batch_size,), np.int32,
                                   sharding=self._sharding))

    mask = jax.ShapeDtypeStruct((self._config.eval_batch_size,), np.float32,
                                sharding=self._sharding)
    return spec(self._config.batch_size), spec(
        self._config.eval_batch_size), mask

  def train_batches(self, epoch: int) -> Iterator:
    config = self._config
    table = input_pipeline.epoch_batches(config.seed, epoch, self.train_size,
                                         config.batch_size)

    def load(step, row, index):
      rng = np.random.default_rng([config.seed, epoch, step, row])
      image, label = self.dataset.train[index]
      return train_image(image, config.image_size, config.augment, rng), label

    yield from self._batches(table, self._train_rows, load)

  def eval_batches(self) -> Iterator:
    table, masks = input_pipeline.eval_batches(self.test_size,
                                               self._config.eval_batch_size)

    def load(step, row, index):
      del step, row
      image, label = self.dataset.test[index]
      return resize(image, self._config.image_size), label

    rows = self._eval_rows
    for batch, mask in zip(self._batches(table, rows, load), masks):
      yield batch, self._global(mask[rows], len(mask))

  def _global(self, local: np.ndarray, batch_size: int) -> jax.Array:
    return jax.make_array_from_process_local_data(
        self._sharding, local, (batch_size, *local.shape[1:]))

  def _batches(self, table: np.ndarray, rows: slice, load) -> Iterator:
    """Global (images, labels) of each row of `table`, this process loading
    its `rows` of each with `load(step, row, example index)`."""
    batch_size = table.shape[1]
    with concurrent.futures.ThreadPoolExecutor(self.threads) as pool:
      pending = collections.deque()

      def submit(step):
        pending.append([
            pool.submit(load, step, row, table[step, row])
            for row in range(rows.start, rows.stop)
        ])

      for step in range(min(self._prefetch, len(table))):
        submit(step)
      for step in range(len(table)):
        if step + self._prefetch < len(table):
          submit(step + self._prefetch)
        examples = [future.result() for future in pending.popleft()]
        images = np.stack([image for image, _ in examples])
        labels = np.asarray([label for _, label in examples], np.int32)
        yield (self._global(images, batch_size),
               self._global(labels, batch_size))

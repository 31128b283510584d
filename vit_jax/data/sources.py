"""The dataset a config names, opened for reading by example index.

Datasets (`config.dataset`):
  cifar10, cifar100   the official binary or python release under
                      `config.data_dir`, read into memory; without a
                      data_dir, the binary release in the download cache
                      ($VIT_JAX_DATA_DIR or ~/.cache/vit_jax), downloaded
                      there the first time (`cifar`, `download`);
  image_folder        `data_dir/{train,test}/<class>/*.{jpg,jpeg,png}`, read
                      file by file (`image_folder`);
  tfds:NAME           a tensorflow-datasets dataset already prepared in
                      `data_dir`, never downloaded: by index without
                      TensorFlow when it is in the array_record format, else
                      whole with TensorFlow (on-device input only;
                      `tfds_source`).
A dataset that is missing (and, for CIFAR, cannot be downloaded) is a
`DatasetError` that says where it looked and how to supply the data. Both
inputs (`on_device`, `streaming`) open their data through `open_dataset`.
"""

import os
import pathlib

import numpy as np

from vit_jax.data import cifar
from vit_jax.data import image_folder
from vit_jax.data import preprocess
from vit_jax.data import tfds_source
# The split types are defined in the leaf module `dataset`, which the readers
# import; they are named here too, where the inputs and tools open data.
from vit_jax.data.dataset import ArraySource
from vit_jax.data.dataset import Dataset
from vit_jax.data.dataset import Source
from vit_jax.data.dataset import SubsetSource
from vit_jax.data.image_folder import read_image
from vit_jax.errors import DatasetError

__all__ = ['DATA_DIR_ENV', 'ArraySource', 'Dataset', 'Source', 'SubsetSource',
           'data_dir', 'first', 'local_data_dir', 'open_dataset', 'read_image',
           'to_arrays']

DATA_DIR_ENV = 'VIT_JAX_DATA_DIR'


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
  if name in cifar.NUM_CLASSES:
    # Without config.data_dir, the download cache ($VIT_JAX_DATA_DIR
    # relocates it), where a missing release is fetched.
    directory = local_data_dir(config) if config.data_dir else None
    dataset = cifar.open_cifar(name, directory,
                               config.train_examples_per_file)
  elif name == 'image_folder':
    dataset = image_folder.open_image_folder(local_data_dir(config))
  elif name.startswith('tfds:'):
    dataset = tfds_source.open_tfds(name[len('tfds:'):], data_dir(config),
                                    config.train_split, config.test_split,
                                    whole)
  else:
    raise DatasetError(
        f'Unknown dataset {name!r}: use cifar10, cifar100, image_folder or '
        'tfds:NAME.')
  return Dataset(
      train=first(dataset.train, config.train_examples, 'train_examples'),
      test=first(dataset.test, config.test_examples, 'test_examples'),
      num_classes=dataset.num_classes)

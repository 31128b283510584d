"""The dataset a config names, read by example index, cut to its sizes."""

import dataclasses
import os
import pathlib

import numpy as np

from vit_jax.data import cifar
from vit_jax.data import download
from vit_jax.data import image_folder
from vit_jax.data import preprocess
from vit_jax.data import tfds_source
from vit_jax.data.dataset import ArraySource
from vit_jax.data.dataset import Dataset
from vit_jax.data.dataset import Source
from vit_jax.data.dataset import SubsetSource
from vit_jax.data.image_folder import read_image  # for callers of sources
from vit_jax.errors import DatasetError

DATA_DIR_ENV = download.DATA_DIR_ENV


def to_arrays(source: Source, image_size: int) -> tuple[np.ndarray, np.ndarray]:
  """A whole split as (uint8 images, int32 labels), files resized to stack."""
  if isinstance(source, ArraySource):
    return source.images, source.labels
  images, labels = zip(*(source[i] for i in range(len(source))))
  return (np.stack([preprocess.resize(image, image_size)
                    for image in images]), np.asarray(labels, np.int32))


def class_counts(sizes: np.ndarray, count: int,
                 rng: np.random.Generator) -> np.ndarray:
  """How many of `count` to draw per class: one each, then largest remainder."""
  num_classes = len(sizes)
  if count < num_classes:
    return np.bincount(rng.choice(num_classes, count, replace=False),
                       minlength=num_classes)
  left = np.asarray(sizes, np.int64) - 1
  shares, remainders = np.divmod((count - num_classes) * left, left.sum())
  counts, ties_drawn = 1 + shares, rng.permutation(num_classes)
  largest_first = ties_drawn[np.argsort(-remainders[ties_drawn], kind='stable')]
  counts[largest_first[:count - counts.sum()]] += 1
  return counts


def _across_classes(labels: np.ndarray, count: int, seed: int) -> np.ndarray:
  """The sorted indices of `count` examples drawn across classes by `seed`."""
  rng = np.random.default_rng(seed)
  _, sizes = np.unique(labels, return_counts=True)
  counts = class_counts(sizes, count, rng)
  by_class = np.split(np.argsort(labels, kind='stable'), np.cumsum(sizes)[:-1])
  drawn = [rng.permutation(indices)[:k] for indices, k in zip(by_class, counts)]
  return np.sort(np.concatenate(drawn))


def subset(dataset: Dataset, split: str, count: int, seed: int) -> Source:
  """A split's `count` examples (0: all): the first, or drawn across classes."""
  source = getattr(dataset, split)
  indices = _chosen(dataset, split, count, seed)
  return source if indices is None else _take(source, indices)


def _chosen(dataset: Dataset, split: str, count: int,
            seed: int) -> np.ndarray | None:
  """The indices `subset` keeps, sorted; None: all."""
  source = getattr(dataset, split)
  if not count or count == len(source):
    return None
  if count > len(source):
    raise DatasetError(f'config.{split}_examples={count} but the dataset has '
                       f'only {len(source)}; lower it or set it to 0 for all.')
  return (_across_classes(np.asarray(source.labels), count, seed)
          if dataset.ordered_by_class else np.arange(count))


def _take(source: Source, indices: np.ndarray) -> Source:
  return (ArraySource(source.images[indices], source.labels[indices])
          if isinstance(source, ArraySource) else SubsetSource(source, indices))


def _validation_drawn(
    pool: Source, count: int, available: int, where: str,
    fix: str = 'pass --config.validation_dir=DIR (a folder of <class>/ image '
    'folders)'
) -> np.ndarray:
  """The sorted indices of `count` validation examples drawn from `pool`."""
  if count > available:
    raise DatasetError(f'config.validation_examples={count}, but {available} '
                       f'can be drawn from {where}: lower it, or {fix}.')
  if hasattr(pool, 'labels'):  # drawn across classes where labels are at hand
    return _across_classes(np.asarray(pool.labels), count, 0)
  return np.sort(np.random.default_rng(0).choice(len(pool), count, False))


def _training_and_validation(dataset: Dataset,
                             config) -> tuple[Source, Source | None]:
  """The examples the run trains on, and those it holds out for validation."""
  kept, count = config.train_examples, config.validation_examples
  trained, validation = _chosen(dataset, 'train', kept, config.seed), None
  if count and config.validation_dir:  # only the images drawn are read
    folder = config.validation_dir
    validation = image_folder.open_split(
        pathlib.Path(folder).expanduser(), dataset,
        lambda pool: _validation_drawn(pool, count, len(
            pool), f'--config.validation_dir={folder}', 'pass a larger one'))
  elif count and dataset.spare is not None:
    validation = _take(
        dataset.spare,
        _validation_drawn(dataset.spare, count, len(dataset.spare),
                          'the examples the run does not train on'))
  elif count:
    # Held out first, by seed 0: the same images for every seed and every
    # train_examples, which are then kept from the rest.
    keeps = max(kept, 1)
    chosen = _validation_drawn(dataset.train, count,
                               len(dataset.train) - keeps,
                               f'the training split, keeping {keeps} to train')
    validation = _take(dataset.train, chosen)
    trained = np.setdiff1d(np.arange(len(dataset.train)), chosen)
    if kept and dataset.ordered_by_class:
      labels = np.asarray(dataset.train.labels)[trained]
      trained = trained[_across_classes(labels, kept, config.seed)]
    trained = trained[:kept or None]
  train = dataset.train if trained is None else _take(dataset.train, trained)
  return train, validation


def data_dir(config) -> pathlib.Path | None:
  """config.data_dir, else $VIT_JAX_DATA_DIR, else None."""
  directory = config.data_dir or os.environ.get(DATA_DIR_ENV)
  return pathlib.Path(directory).expanduser() if directory else None


def _local_data_dir(config) -> pathlib.Path:
  """`data_dir(config)`, which must be a readable directory."""
  if (directory := data_dir(config)) is None:
    raise DatasetError(f'{config.dataset} is read from a local directory: pass '
                       f'--config.data_dir=DIR or set ${DATA_DIR_ENV}=DIR.')
  if directory.exists() and not directory.is_dir():
    raise DatasetError(f'The data directory {directory} is a file: pass the '
                       'directory that holds the dataset.')
  if not directory.is_dir():
    raise DatasetError(f'The data directory {directory} does not exist: pass '
                       'the one that holds the dataset (--config.data_dir=DIR; '
                       '--data_dir=DIR to evaluate or analyze a run whose '
                       'data moved).')
  if not os.access(directory, os.R_OK | os.X_OK):
    raise DatasetError(f'The data directory {directory} cannot be read '
                       '(permission denied); check its permissions.')
  return directory


def open_dataset(config, whole: bool = False) -> Dataset:
  """The dataset `config` names, cut to the requested sizes."""
  name = config.dataset
  if name in cifar.NUM_CLASSES:
    directory = _local_data_dir(config) if config.data_dir else None
    dataset = cifar.open_cifar(name, directory, config.train_examples_per_file)
  elif name == 'image_folder':
    return image_folder.open_image_folder(_local_data_dir(config),
                                          lambda d: _cut(d, config))
  elif name.startswith('tfds:'):
    dataset = tfds_source.open_tfds(name[len('tfds:'):], data_dir(config),
                                    config.train_split, config.test_split,
                                    whole)
  else:
    raise DatasetError(f'Unknown dataset {name!r}: '
                       'use cifar10, cifar100, image_folder or tfds:NAME.')
  return _cut(dataset, config)


def _cut(dataset: Dataset, config) -> Dataset:
  """`dataset` cut to the config's sizes, with its validation split."""
  test = subset(dataset, 'test', config.test_examples, config.seed)
  train, validation = _training_and_validation(dataset, config)
  return dataclasses.replace(dataset, train=train, validation=validation,
                             test=test)

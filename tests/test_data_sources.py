"""Opening the dataset a config names: the dispatch, the data directory,
the deterministic subsets, whole splits as arrays, and the errors that say
what to do."""

import dataclasses

import numpy as np
import pytest

from tests.conftest import png
from vit_jax import config_schema
from vit_jax.data import sources
from vit_jax.errors import DatasetError


def _config(data_dir, dataset='cifar10', **overrides):
  config = config_schema.defaults()
  config.update(dict(dataset=dataset, data_dir=str(data_dir), **overrides))
  return config


@dataclasses.dataclass(frozen=True)
class _ListSource:
  """A split read example by example, as image files are."""
  examples: list

  def __len__(self):
    return len(self.examples)

  def __getitem__(self, index):
    return self.examples[index]


def test_data_dir_from_environment(cifar10_binary, monkeypatch):
  data_dir, _ = cifar10_binary
  monkeypatch.setenv(sources.DATA_DIR_ENV, str(data_dir))
  assert len(sources.open_dataset(_config('')).train) == 96


def test_deterministic_subset_is_the_first_examples(cifar10_binary):
  data_dir, _ = cifar10_binary
  full = sources.open_dataset(_config(data_dir))
  subset = sources.open_dataset(
      _config(data_dir, train_examples=50, test_examples=7))
  np.testing.assert_array_equal(subset.train.images, full.train.images[:50])
  np.testing.assert_array_equal(subset.test.labels, full.test.labels[:7])
  with pytest.raises(DatasetError,
                     match='train_examples=500 but the dataset has only 96'):
    sources.open_dataset(_config(data_dir, train_examples=500))


def test_the_first_examples_of_a_split_read_one_by_one():
  examples = [(np.full((2, 3, 3), i, np.uint8), i % 2) for i in range(4)]
  source = _ListSource(examples)
  assert sources.first(source, 0, 'test_examples') is source
  subset = sources.first(source, 3, 'test_examples')
  assert len(subset) == 3 and subset[2][1] == 0
  with pytest.raises(IndexError):
    subset[3]  # pylint: disable=pointless-statement
  with pytest.raises(DatasetError, match='test_examples=5 but the dataset '
                     'has only 4'):
    sources.first(source, 5, 'test_examples')


def test_to_arrays_resizes_examples_read_one_by_one_to_stack_them():
  source = _ListSource([(np.full((2 + i, 3, 3), 9, np.uint8), i)
                        for i in range(3)])
  images, labels = sources.to_arrays(source, 4)
  assert images.shape == (3, 4, 4, 3) and images.dtype == np.uint8
  np.testing.assert_array_equal(labels, [0, 1, 2])
  assert labels.dtype == np.int32


def test_an_image_folder_is_opened_and_cut_to_the_requested_sizes(tmp_path):
  rng = np.random.default_rng(0)
  for split, count in (('train', 3), ('test', 2)):
    for name in ('cat', 'dog'):
      (tmp_path / split / name).mkdir(parents=True)
      for i in range(count):
        (tmp_path / split / name / f'{i}.png').write_bytes(
            png(rng.integers(0, 256, (9 + i, 11, 3), np.uint8)))
  dataset = sources.open_dataset(_config(tmp_path, 'image_folder',
                                         test_examples=3))
  assert (len(dataset.train), len(dataset.test), dataset.num_classes) == (6, 3,
                                                                          2)
  with pytest.raises(DatasetError, match='has only 4'):
    sources.open_dataset(_config(tmp_path, 'image_folder', test_examples=5))


def test_missing_data_says_where_it_looked_and_what_to_do(tmp_path):
  with pytest.raises(DatasetError, match='No cifar10 found in'):
    sources.open_dataset(_config(tmp_path))
  with pytest.raises(DatasetError, match='does not exist'):
    sources.open_dataset(_config(tmp_path / 'nowhere'))
  (tmp_path / 'file').write_text('')
  with pytest.raises(DatasetError, match='is a file'):
    sources.open_dataset(_config(tmp_path / 'file', 'image_folder'))
  with pytest.raises(DatasetError, match='pass --config.data_dir'):
    sources.open_dataset(_config('', 'image_folder'))
  with pytest.raises(DatasetError, match="Unknown dataset 'mnist'"):
    sources.open_dataset(_config(tmp_path, 'mnist'))

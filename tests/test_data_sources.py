"""Opening the dataset a config names, its subsets, and its errors."""

import tarfile

import numpy as np
import pytest

from tests import helpers
from vit_jax import data
from vit_jax.data import sources
from vit_jax.errors import DatasetError
from vit_jax.runtime import sharding


def _config(data_dir, dataset='cifar10', **overrides):
  return helpers.schema_config(dataset=dataset, data_dir=str(data_dir),
                               **overrides)


def test_a_subset_is_the_first_examples_and_a_folder_needs_a_data_dir(
    cifar10_dir, monkeypatch):
  """A data_dir missing, a file, or of no data: test_faults, test_data_cifar."""
  full = sources.open_dataset(_config(cifar10_dir))
  subset = sources.open_dataset(
      _config(cifar10_dir, train_examples=50, test_examples=7))
  np.testing.assert_array_equal(subset.train.images, full.train.images[:50])
  np.testing.assert_array_equal(subset.test.labels, full.test.labels[:7])
  with pytest.raises(DatasetError, match='pass --config.data_dir'):
    sources.open_dataset(_config('', 'image_folder'))
  monkeypatch.setenv(sources.DATA_DIR_ENV, str(cifar10_dir))
  assert len(sources.open_dataset(_config('')).train) == 96


def test_first_examples_and_arrays_of_a_split_read_one_by_one():
  source = [(np.full((2, 3, 3), i, np.uint8), i % 2) for i in range(4)]
  dataset = sources.Dataset(source, source, 2)
  assert sources.subset(dataset, 'test', 0, seed=0) is source
  subset = sources.subset(dataset, 'test', 3, seed=0)
  assert len(subset) == 3 and subset[2][1] == 0
  with pytest.raises(IndexError):
    subset[3]  # pylint: disable=pointless-statement
  with pytest.raises(DatasetError, match='test_examples=5 but the dataset '
                     'has only 4'):
    sources.subset(dataset, 'test', 5, seed=0)
  # to_arrays resizes the examples to stack them.
  source = [(np.full((2 + i, 3, 3), 9, np.uint8), i) for i in range(3)]
  images, labels = sources.to_arrays(source, 4)
  assert images.shape == (3, 4, 4, 3) and images.dtype == np.uint8
  np.testing.assert_array_equal(labels, [0, 1, 2])
  assert labels.dtype == np.int32


# Every class, however small: 3 of [1000, 1, 1] is one of each.
@pytest.mark.parametrize('sizes, count, expected',
                         [([1000] * 10, 640, [64] * 10),
                          ([50, 30, 20], 10, [5, 3, 2]),
                          ([1000, 1, 1], 3, [1, 1, 1]),
                          ([1000, 1, 1], 500, [498, 1, 1])])
def test_class_counts_are_proportional_and_add_up(sizes, count, expected):
  counts = sources.class_counts(np.array(sizes), count,
                                np.random.default_rng(0))
  np.testing.assert_array_equal(counts, expected)


def test_class_counts_break_ties_and_fall_short_by_the_seed():
  counts = lambda count, seed: sources.class_counts(np.array([3] * 10), count,
                                                    np.random.default_rng(seed))
  # The second count is fewer than the classes.
  for count, expected in ((15, [1] * 5 + [2] * 5), (4, [0] * 6 + [1] * 4)):
    assert sorted(counts(count, 0)) == expected
    assert not np.array_equal(counts(count, 0), counts(count, 1))


def test_an_image_folder_subset_holds_every_class_in_proportion(tmp_path):
  """The folder lists its images by class: the first 12 are airplanes."""
  helpers.write_image_folder(
      tmp_path, {'train': (12, 8, 4), 'test':
          (6, 6, 6)}, ('airplane', 'bird', 'cat'),
      lambda rng, i, _: rng.integers(0, 256, (9 + i % 2, 11, 3), np.uint8))

  def cut(seed, **sizes):
    dataset = sources.open_dataset(
        _config(tmp_path, 'image_folder', seed=seed, **sizes))
    return dataset.train, dataset.test

  train, test = cut(seed=0, train_examples=12, test_examples=9)
  assert (len(train), len(test), len(cut(seed=0)[0])) == (12, 9, 24)
  np.testing.assert_array_equal(np.bincount(train.labels), [6, 4, 2])
  np.testing.assert_array_equal(np.bincount(test.labels), [3, 3, 3])
  assert [train[i][1] for i in range(12)] == sorted(train.labels)
  again, _ = cut(seed=0, train_examples=12)
  held_out = [[
      image.tobytes() for image, _ in sources.open_dataset(
          _config(tmp_path, 'image_folder', seed=seed, train_examples=12,
                  validation_examples=6)).validation
  ] for seed in (0, 1)]
  assert held_out[0] == held_out[1]  # drawn first, the same for every seed
  np.testing.assert_array_equal(again.indices, train.indices)
  other, _ = cut(seed=1, train_examples=12)
  assert not np.array_equal(other.indices, train.indices)
  np.testing.assert_array_equal(np.bincount(other.labels), [6, 4, 2])

  # Only the images a run reads are checked: a damaged one it leaves out
  # stops only the runs that read it (all 24, or 12 more to validate on).
  undrawn = next(i for i in range(24) if i not in train.indices)
  train.source.paths[undrawn].write_bytes(b'damaged')
  assert len(cut(seed=0, train_examples=12)[0]) == 12
  for sizes in [{}, dict(train_examples=12, validation_examples=12)]:
    with pytest.raises(DatasetError, match='1 problem in the image folder'):
      cut(seed=0, **sizes)


_CIFAR10_JPEG = helpers.ROOT.parent / 'shared' / 'data' / 'cifar10-jpeg-full.tar.gz'


@pytest.mark.skipif(not _CIFAR10_JPEG.exists(),
                    reason=f'no {_CIFAR10_JPEG} on this machine')
def test_640_test_images_of_the_cifar10_jpeg_folder_are_64_of_each_class(
    tmp_path):
  """The real folder's 10,000 test JPEGs (training: one of each class)."""
  with tarfile.open(_CIFAR10_JPEG) as archive:
    archive.extractall(
        tmp_path, filter='data',
        members=[m for m in archive if m.name.startswith('test/')])
  for folder in (tmp_path / 'test').iterdir():
    (tmp_path / 'train' / folder.name).mkdir(parents=True)
    (tmp_path / 'train' / folder.name / '0.jpg').symlink_to(
        next(folder.iterdir()))
  dataset = sources.open_dataset(
      _config(tmp_path, 'image_folder', test_examples=640))
  assert dataset.num_classes == 10 and len(dataset.train) == 10
  np.testing.assert_array_equal(np.bincount(dataset.test.labels), [64] * 10)


def test_validation_examples_are_never_trained_on_and_the_same_every_seed(
    cifar10_dir, tmp_path):
  """Drawn from what the config leaves out of training, or validation_dir."""
  # 48 + 48 training images in 5 files
  full = sources.open_dataset(_config(cifar10_dir)).train

  def rows(split):
    return {image.tobytes() for image in sources.to_arrays(split, 32)[0]}

  def opened(**fields):
    dataset, other_seed = (sources.open_dataset(
        _config(cifar10_dir, seed=seed, **fields)) for seed in (0, 1))
    assert rows(dataset.validation) == rows(other_seed.validation)
    assert not rows(dataset.train) & rows(dataset.validation)
    return dataset

  spare = opened(train_examples_per_file=12, validation_examples=20)
  assert len(spare.train) == 60 and len(spare.validation) == 20
  assert rows(spare.train) | rows(spare.validation) <= rows(full)
  left_out = opened(train_examples=80, validation_examples=16)
  fewer = opened(train_examples=40, validation_examples=16)  # drawn first
  assert rows(fewer.validation) == rows(left_out.validation)
  assert rows(left_out.validation) == rows(full) - rows(left_out.train)
  held_out = opened(validation_examples=30)
  assert len(held_out.train) == 66
  assert rows(held_out.train) | rows(held_out.validation) == rows(full)

  folder = tmp_path / 'held_out'
  helpers.write_image_folder(
      tmp_path, {'held_out': 3}, [f'class_{label}' for label in range(10)],
      lambda _, i, label: np.full((32, 32, 3), 10 * label + i, np.uint8))
  from_dir = dict(validation_dir=str(folder), validation_examples=20)
  from_folder = opened(**from_dir)
  assert len(from_folder.train) == 96
  # On the devices, the folder's images are held at CIFAR's 32 px beside its
  # arrays, whatever the image size: the step resizes them all.
  assert data.create_input(
      _config(cifar10_dir, image_size=48, batch_size=16, **from_dir),
      sharding.make_mesh()).eval_data[0].shape == (37 + 20, 32, 32, 3)
  assert sorted(image[0, 0, 0] // 10 == label
                for image, label in (from_folder.validation[i]
                                     for i in range(20))) == [True] * 20
  # Only the images drawn are read, so only they are checked.
  drawn = from_folder.validation.paths
  next(p for p in folder.rglob('*')
       if p.is_file() and p not in drawn).write_bytes(b'damaged')
  assert opened(**from_dir).validation.paths == drawn
  drawn[0].write_bytes(b'damaged')
  with pytest.raises(DatasetError, match='1 problem in the image folder'):
    sources.open_dataset(_config(cifar10_dir, **from_dir))

  for fields, said in [
      (dict(train_examples=90, validation_examples=7),
       'validation_examples=7, but 6 can be drawn from the training split, '
       r'keeping 90 to train: lower it, or pass --config.validation_dir=DIR'),
      (dict(validation_examples=96), 'validation_examples=96, but 95 can be '
       'drawn from the training split, keeping 1 to train'),
      (dict(from_dir, validation_examples=31), 'validation_examples=31, but 30 '
       f'can be drawn from --config.validation_dir={folder}: lower it, or pass'
      ),
      (dict(validation_dir=str(folder / 'class_1'), validation_examples=1),
       r'holds 0 class folders, but the dataset has 10 classes'),
  ]:
    with pytest.raises(DatasetError, match=said):
      sources.open_dataset(_config(cifar10_dir, **fields))
  # A dataset that names its classes: a folder must name them alike.
  (cifar10_dir / 'cifar-10-batches-bin' / 'batches.meta.txt').write_text(
      '\n'.join(helpers.CIFAR10_CLASSES))
  with pytest.raises(
      DatasetError, match=f'{folder} holds the class folders class_0, .*; '
      'the dataset names its classes airplane, automobile, .*: name the '
      'folders as the dataset does'):
    sources.open_dataset(_config(cifar10_dir, **from_dir))

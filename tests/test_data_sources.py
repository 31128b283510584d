"""Datasets on disk: both CIFAR formats, image folders, tfds, subsets, and
the errors that say what to do."""

import numpy as np
import pytest

from tests.conftest import png
from tests.conftest import prepare_tfds_array_record
from tests.conftest import random_cifar
from tests.conftest import write_cifar_binary
from tests.conftest import write_cifar_python
from vit_jax import config_schema
from vit_jax.data import sources
from vit_jax.data.sources import DatasetError


def _config(data_dir, dataset='cifar10', **overrides):
  config = config_schema.defaults()
  config.update(dict(dataset=dataset, data_dir=str(data_dir), **overrides))
  return config


def _assert_same(a, b):
  np.testing.assert_array_equal(a.images, b.images)
  np.testing.assert_array_equal(a.labels, b.labels)


class _Split:

  def __init__(self, source, image_size):
    self.images, self.labels = sources.to_arrays(source, image_size)


class _Loaded:
  """A dataset as the on-device input reads it: whole, as arrays."""

  def __init__(self, config):
    dataset = sources.open_dataset(config, whole=True)
    self.train = _Split(dataset.train, config.image_size)
    self.test = _Split(dataset.test, config.image_size)
    self.num_classes = dataset.num_classes


def test_both_cifar10_formats_load_to_the_same_arrays(cifar10_binary,
                                                      tmp_path):
  data_dir, splits = cifar10_binary
  write_cifar_python(tmp_path / 'py' / 'cifar-10-batches-py', {
      'data_batch_1': splits['data_batch_1.bin'],
      'data_batch_2': splits['data_batch_2.bin'],
      'test_batch': splits['test_batch.bin'],
  })
  binary = _Loaded(_config(data_dir))
  python = _Loaded(_config(tmp_path / 'py'))
  _assert_same(binary.train, python.train)
  _assert_same(binary.test, python.test)
  assert binary.num_classes == python.num_classes == 10

  # Pixels land where the official planar layout puts them.
  expected_train = np.concatenate([splits['data_batch_1.bin'][0],
                                   splits['data_batch_2.bin'][0]])
  np.testing.assert_array_equal(binary.train.images, expected_train)
  np.testing.assert_array_equal(binary.test.labels,
                                splits['test_batch.bin'][1])
  assert binary.train.images.dtype == np.uint8
  assert binary.train.labels.dtype == np.int32


def test_both_cifar100_formats_load_fine_labels(tmp_path):
  train, test = random_cifar(20, 100, seed=4), random_cifar(10, 100, seed=5)
  write_cifar_binary(tmp_path / 'bin' / 'cifar-100-binary',
                     {'train.bin': train, 'test.bin': test}, label_bytes=2)
  write_cifar_python(tmp_path / 'py' / 'cifar-100-python',
                     {'train': train, 'test': test}, label_key=b'fine_labels')
  binary = _Loaded(_config(tmp_path / 'bin', 'cifar100'))
  python = _Loaded(_config(tmp_path / 'py', 'cifar100'))
  for loaded in (binary, python):
    np.testing.assert_array_equal(loaded.train.images, train[0])
    np.testing.assert_array_equal(loaded.train.labels, train[1])
    np.testing.assert_array_equal(loaded.test.labels, test[1])
    assert loaded.num_classes == 100


def test_data_dir_from_environment(cifar10_binary, monkeypatch):
  data_dir, _ = cifar10_binary
  monkeypatch.setenv(sources.DATA_DIR_ENV, str(data_dir))
  assert len(_Loaded(_config('')).train.labels) == 96


def test_deterministic_subset_is_the_first_examples(cifar10_binary):
  data_dir, _ = cifar10_binary
  full = _Loaded(_config(data_dir))
  subset = _Loaded(
      _config(data_dir, train_examples=50, test_examples=7))
  np.testing.assert_array_equal(subset.train.images, full.train.images[:50])
  np.testing.assert_array_equal(subset.test.labels, full.test.labels[:7])
  with pytest.raises(DatasetError,
                     match='train_examples=500 but the dataset has only 96'):
    _Loaded(_config(data_dir, train_examples=500))


def test_the_study_subset_is_the_same_from_the_full_release(tmp_path):
  """The study's 5,000: the first 1,000 of each training file (here 4 of
  each of 5 files of 6), as ../shared/data/cifar10-5k holds them."""
  files = {f'data_batch_{i}.bin': random_cifar(6, 10, seed=i)
           for i in range(1, 6)}
  files['test_batch.bin'] = random_cifar(7, 10, seed=9)
  write_cifar_binary(tmp_path / 'full' / 'cifar-10-batches-bin', files)
  subset = {name: (images[:4], labels[:4]) if name.startswith('data') else
            (images[:5], labels[:5]) for name, (images, labels) in files.items()}
  write_cifar_binary(tmp_path / 'subset' / 'cifar-10-batches-bin', subset)
  from_full = _Loaded(_config(tmp_path / 'full', train_examples_per_file=4,
                              test_examples=5))
  from_subset = _Loaded(_config(tmp_path / 'subset', train_examples_per_file=4,
                                test_examples=5))
  for split in ('train', 'test'):
    for field in ('images', 'labels'):
      np.testing.assert_array_equal(getattr(getattr(from_full, split), field),
                                    getattr(getattr(from_subset, split), field))
  assert len(from_full.train.labels) == 20
  np.testing.assert_array_equal(from_full.train.labels[4:8],
                                files['data_batch_2.bin'][1][:4])
  with pytest.raises(DatasetError, match='train_examples_per_file=5 but .* '
                     'fewer in data_batch_1.bin'):
    _Loaded(_config(tmp_path / 'subset', train_examples_per_file=5))


def test_image_folder(tmp_path):
  from PIL import Image
  rng = np.random.default_rng(0)
  written = {}
  for split, count in (('train', 3), ('test', 2)):
    for label, name in enumerate(['cat', 'dog']):
      (tmp_path / split / name).mkdir(parents=True)
      for i in range(count):
        image = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
        Image.fromarray(image).save(tmp_path / split / name / f'{i}.png')
        written.setdefault(split, []).append((image, label))
  dataset = _Loaded(
      _config(tmp_path, 'image_folder', image_size=8))
  assert dataset.num_classes == 2
  for split in ('train', 'test'):
    loaded = getattr(dataset, split)
    np.testing.assert_array_equal(loaded.images,
                                  np.stack([i for i, _ in written[split]]))
    np.testing.assert_array_equal(loaded.labels, [l for _, l in written[split]])


def test_missing_data_says_where_it_looked_and_what_to_do(tmp_path):
  with pytest.raises(DatasetError,
                     match=r'No cifar10 found in .*cifar-10-batches-bin.*'
                     r'--config.data_dir=DIR, or leave data_dir unset to '
                     r'download it'):
    _Loaded(_config(tmp_path))
  with pytest.raises(DatasetError, match='does not exist'):
    _Loaded(_config(tmp_path / 'nowhere'))
  with pytest.raises(DatasetError, match='pass --config.data_dir'):
    _Loaded(_config('', 'image_folder'))
  with pytest.raises(DatasetError, match="Unknown dataset 'mnist'"):
    _Loaded(_config(tmp_path, 'mnist'))


def test_malformed_data_names_the_file(cifar10_binary):
  data_dir, _ = cifar10_binary
  broken = data_dir / 'cifar-10-batches-bin' / 'test_batch.bin'
  broken.write_bytes(broken.read_bytes()[:-5])
  with pytest.raises(DatasetError,
                     match='test_batch.bin is not a CIFAR binary file'):
    _Loaded(_config(data_dir))


def test_tfds_dataset_prepared_on_disk(tmp_path):
  tf = pytest.importorskip('tensorflow')
  tfds = pytest.importorskip('tensorflow_datasets')
  train, test = random_cifar(12, 3, seed=6), random_cifar(5, 3, seed=7)
  builder = tfds.dataset_builders.TfDataBuilder(
      name='tiny_images', version='1.0.0', data_dir=str(tmp_path),
      split_datasets={
          split: tf.data.Dataset.from_tensor_slices(
              {'image': images, 'label': labels})
          for split, (images, labels) in (('train', train), ('test', test))},
      features=tfds.features.FeaturesDict({
          'image': tfds.features.Image(shape=(32, 32, 3)),
          'label': tfds.features.ClassLabel(num_classes=3)}))
  builder.download_and_prepare()

  dataset = _Loaded(_config(tmp_path, 'tfds:tiny_images'))
  assert dataset.num_classes == 3
  for loaded, (images, labels) in ((dataset.train, train),
                                   (dataset.test, test)):
    order = np.argsort([img.tobytes() for img in loaded.images])
    expected = np.argsort([img.tobytes() for img in images])
    np.testing.assert_array_equal(loaded.images[order], images[expected])
    np.testing.assert_array_equal(loaded.labels[order], labels[expected])

  with pytest.raises(DatasetError, match='not prepared'):
    _Loaded(_config(tmp_path / 'empty', 'tfds:mnist'))


def test_array_record_tfds_is_read_whole_without_tensorflow(tmp_path):
  name = prepare_tfds_array_record(tmp_path, 'VitJaxFixedSizeTest', 4, 2,
                                   lambda i: (8, 8, 3))
  dataset = _Loaded(_config(tmp_path, name, image_size=8))
  assert dataset.train.images.shape == (4, 8, 8, 3)
  assert sorted(dataset.train.labels.tolist()) == [0, 0, 1, 2]
  assert dataset.num_classes == 3


def test_image_folder_is_listed_and_read_lazily(tmp_path):
  rng = np.random.default_rng(0)
  for split, count in (('train', 3), ('test', 2)):
    for name in ('cat', 'dog'):
      (tmp_path / split / name).mkdir(parents=True)
      for i in range(count):
        (tmp_path / split / name / f'{i}.png').write_bytes(
            png(rng.integers(0, 256, (9 + i, 11, 3), np.uint8)))
  config = _config(tmp_path, 'image_folder', test_examples=3)
  dataset = sources.open_dataset(config)
  assert (len(dataset.train), len(dataset.test), dataset.num_classes) == (6, 3,
                                                                          2)
  image, label = dataset.train[4]
  assert image.shape == (10, 11, 3) and label == 1
  with pytest.raises(DatasetError, match='has only 4'):
    sources.open_dataset(_config(tmp_path, 'image_folder', test_examples=5))


def test_tfds_array_record_is_read_by_index_at_any_image_size(tmp_path):
  name = prepare_tfds_array_record(
      tmp_path, 'VitJaxVariableSizeTest', 7, 4,
      lambda i: (20 + 3 * i, 30 - 2 * i, 3))
  config = _config(tmp_path, name, image_size=16)
  dataset = sources.open_dataset(config)
  assert (len(dataset.train), len(dataset.test), dataset.num_classes) == (7, 4,
                                                                          3)
  assert {dataset.train[i][0].shape for i in range(7)} == {
      (20 + 3 * i, 30 - 2 * i, 3) for i in range(7)}
  assert sorted(dataset.train[i][1] for i in range(7)) == [0, 0, 0, 1, 1, 2, 2]
  # Read whole for the on-device input, each image resized to image_size.
  assert _Loaded(config).train.images.shape == (7, 16, 16, 3)
  with pytest.raises(DatasetError, match='not prepared'):
    sources.open_dataset(_config(tmp_path / 'empty', name))

"""CIFAR on disk: both formats, the study's subset, the errors."""

import pickle

import numpy as np
import pytest

from tests import helpers
from vit_jax.data import cifar
from vit_jax.errors import DatasetError


def _assert_same(a, b):
  np.testing.assert_array_equal(a.images, b.images)
  np.testing.assert_array_equal(a.labels, b.labels)


def test_both_cifar10_formats_load_to_the_same_arrays(cifar10_dir,
                                                      cifar10_splits, tmp_path):
  helpers.write_cifar_python(
      tmp_path / 'py' / 'cifar-10-batches-py',
      {name[:-4]: split for name, split in cifar10_splits.items()})
  (cifar10_dir / 'cifar-10-batches-bin' /
   'batches.meta.txt').write_text(''.join(f'c{i}\n' for i in range(10)) + '\n')
  binary = cifar.load_cifar('cifar10', cifar10_dir)
  python = cifar.load_cifar('cifar10', tmp_path / 'py')
  _assert_same(binary.train, python.train)
  _assert_same(binary.test, python.test)
  assert binary.num_classes == python.num_classes == 10
  # The class names, as each release names them: text, or pickled bytes.
  assert binary.class_names == tuple(f'c{i}' for i in range(10))
  assert python.class_names == ()
  (tmp_path / 'py' / 'cifar-10-batches-py' / 'batches.meta').write_bytes(
      pickle.dumps({b'label_names': [f'c{i}'.encode() for i in range(10)]}))
  assert cifar.load_cifar('cifar10',
                          tmp_path / 'py').class_names == (binary.class_names)
  # A names file that is not text: no names, the data as it was.
  (cifar10_dir / 'cifar-10-batches-bin' / 'batches.meta.txt').write_bytes(
      b'caf\xe9\n' * 10)
  assert cifar.load_cifar('cifar10', cifar10_dir).class_names == ()

  # Pixels land where the official planar layout puts them.
  expected_train = np.concatenate([
      cifar10_splits[f'data_batch_{i}.bin'][0] for i in range(1, 6)
  ])
  np.testing.assert_array_equal(binary.train.images, expected_train)
  np.testing.assert_array_equal(binary.test.labels,
                                cifar10_splits['test_batch.bin'][1])
  assert binary.train.images.dtype == np.uint8
  assert binary.train.labels.dtype == np.int32


def test_both_cifar100_formats_load_fine_labels(tmp_path):
  train, test = helpers.random_cifar(20, 100, seed=4), helpers.random_cifar(
      10, 100, seed=5)
  helpers.write_cifar_binary(tmp_path / 'bin' / 'cifar-100-binary',
                             {'train.bin': train, 'test.bin': test},
                             label_bytes=2)
  helpers.write_cifar_python(tmp_path / 'py' / 'cifar-100-python',
                             {'train': train, 'test': test},
                             label_key=b'fine_labels')
  names = [f'class{i}' for i in range(100)]
  (tmp_path / 'bin' / 'cifar-100-binary' / 'fine_label_names.txt').write_text(
      '\n'.join(names))
  for data_dir in (tmp_path / 'bin', tmp_path / 'py'):
    loaded = cifar.load_cifar('cifar100', data_dir)
    assert loaded.class_names == (tuple(names) if data_dir.name == 'bin' else
                                  ())
    np.testing.assert_array_equal(loaded.train.images, train[0])
    np.testing.assert_array_equal(loaded.train.labels, train[1])
    np.testing.assert_array_equal(loaded.test.labels, test[1])
    assert loaded.num_classes == 100


def test_the_study_subset_is_the_same_from_the_full_release(tmp_path):
  """The first 1,000 of each training file, as cifar10-5k holds them."""
  files = helpers.cifar10_files(helpers.random_cifar(30, 10, seed=1),
                                helpers.random_cifar(7, 10, 9))
  helpers.write_cifar_binary(tmp_path / 'full' / 'cifar-10-batches-bin', files)
  subset = {
      name: (images[:4], labels[:4]) if name.startswith('data') else
            (images[:5], labels[:5]) for name, (images, labels) in files.items()
  }
  helpers.write_cifar_binary(tmp_path / 'subset' / 'cifar-10-batches-bin',
                             subset)
  from_full, from_subset = (cifar.load_cifar('cifar10', tmp_path / folder,
                                             train_per_file=4)
                            for folder in ('full', 'subset'))
  _assert_same(from_full.train, from_subset.train)
  np.testing.assert_array_equal(from_full.test.images[:5],
                                from_subset.test.images)
  assert len(from_full.train) == 20
  np.testing.assert_array_equal(from_full.train.labels[4:8],
                                files['data_batch_2.bin'][1][:4])
  with pytest.raises(
      DatasetError, match='train_examples_per_file=5 but .* '
      'fewer in data_batch_1.bin'):
    cifar.load_cifar('cifar10', tmp_path / 'subset', train_per_file=5)


def test_missing_or_malformed_data_says_where_and_what_to_do(
    cifar10_dir, tmp_path):
  with pytest.raises(
      DatasetError, match=r'No cifar10 found in .*cifar-10-batches-bin.*'
      r'--config.data_dir=DIR, or leave it unset to download it \(class '
      r'folders: --config.dataset=image_folder\)\.$'):
    cifar.load_cifar('cifar10', tmp_path / 'elsewhere')
  # A truncated file: tests/test_faults.py.
  (cifar10_dir / 'cifar-10-batches-bin' / 'data_batch_4.bin').unlink()
  with pytest.raises(
      DatasetError, match=r'cifar-10-batches-bin lacks data_batch_4.bin of '
      r'the cifar10 release \(data_batch_1.bin, .* test_batch.bin\); unpack '
      'the whole release again.'):
    cifar.load_cifar('cifar10', cifar10_dir)

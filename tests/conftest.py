"""Shared fixtures: synthetic datasets in the official on-disk formats."""

import pathlib
import pickle

import numpy as np
import pytest


def random_cifar(num_examples: int, num_classes: int, seed: int):
  """(images NHWC uint8, labels) that every class appears in."""
  rng = np.random.default_rng(seed)
  images = rng.integers(0, 256, (num_examples, 32, 32, 3), dtype=np.uint8)
  labels = np.arange(num_examples) % num_classes
  return images, rng.permutation(labels).astype(np.int32)


def _planar(images):
  return images.transpose(0, 3, 1, 2).reshape(len(images), -1)


def write_cifar_binary(folder: pathlib.Path, files: dict, label_bytes=1):
  """files: name -> (images, labels); CIFAR-100 records carry (coarse, fine)."""
  folder.mkdir(parents=True)
  for name, (images, labels) in files.items():
    label_columns = np.stack([labels // 5, labels], 1) if label_bytes == 2 else (
        labels[:, None])
    records = np.concatenate([label_columns.astype(np.uint8), _planar(images)],
                             axis=1)
    records.tofile(folder / name)


def write_cifar_python(folder: pathlib.Path, files: dict, label_key=b'labels'):
  folder.mkdir(parents=True)
  for name, (images, labels) in files.items():
    with open(folder / name, 'wb') as f:
      pickle.dump({b'data': _planar(images), label_key: labels.tolist()}, f)


@pytest.fixture
def cifar10_binary(tmp_path):
  """A CIFAR-10 binary release with 2 x 48 training and 37 test images."""
  splits = {
      'data_batch_1.bin': random_cifar(48, 10, seed=1),
      'data_batch_2.bin': random_cifar(48, 10, seed=2),
      'test_batch.bin': random_cifar(37, 10, seed=3),
  }
  write_cifar_binary(tmp_path / 'data' / 'cifar-10-batches-bin', splits)
  return tmp_path / 'data', splits

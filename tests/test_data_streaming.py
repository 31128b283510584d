"""Streaming input: host-side batches from any position, sharded."""

import json

import jax
import numpy as np
import pytest

from tests.conftest import prepare_tfds_array_record
from tests.conftest import random_cifar
from tests.conftest import tiny_config
from vit_jax import parallel
from vit_jax import train
from vit_jax.data import input as input_lib
from vit_jax.data import preprocess
from vit_jax.data import sources
from vit_jax.data import streaming


def _array_input(train_split, test_split, **overrides):
  config = tiny_config('', **{
      'seed': 3, 'batch_size': 8, 'eval_batch_size': 8, 'augment': False,
      'input_pipeline': 'streaming', **overrides})
  dataset = sources.Dataset(sources.ArraySource(*train_split),
                            sources.ArraySource(*test_split), 10)
  return streaming.StreamingInput(dataset, config, parallel.make_mesh(),
                                  threads=2)


def test_train_batches_follow_the_seeded_shuffle_from_any_position():
  train_split, test_split = random_cifar(20, 10, 1), random_cifar(5, 10, 2)
  inputs = _array_input(train_split, test_split)  # 2 batches an epoch
  batches = inputs.train_batches({'epoch': 2, 'batch': 1})
  expected = [input_lib.epoch_batches(3, 2, 20, 8)[1],
              *input_lib.epoch_batches(3, 3, 20, 8)]
  for indices in expected:
    images, labels = next(batches)
    assert images.sharding.spec == jax.sharding.PartitionSpec('data')
    np.testing.assert_array_equal(images, train_split[0][indices])
    np.testing.assert_array_equal(labels, train_split[1][indices])
  batches.close()


def test_an_augmented_batch_is_the_same_from_any_starting_position():
  train_split, test_split = random_cifar(20, 10, 1), random_cifar(5, 10, 2)
  inputs = _array_input(train_split, test_split, augment=True, image_size=16)
  from_start = inputs.train_batches(inputs.position(0))
  for _ in range(3):
    third = next(from_start)
  resumed = next(inputs.train_batches(inputs.position(2)))
  for a, b in zip(third, resumed):
    np.testing.assert_array_equal(a, b)


def test_eval_batches_cover_the_test_set_once_resized():
  train_split, test_split = random_cifar(20, 10, 1), random_cifar(13, 10, 2)
  inputs = _array_input(train_split, test_split, image_size=16)
  seen = []
  for (images, labels), mask in inputs.eval_batches():
    assert images.shape == (8, 16, 16, 3)
    seen += [int(label) for label, m in zip(labels, mask) if m]
  assert seen == test_split[1].tolist()
  first = next(iter(inputs.eval_batches()))[0][0][0]
  np.testing.assert_array_equal(first, preprocess.resize(test_split[0][0], 16))


def test_tfds_array_record_streams_variable_size_images(tmp_path):
  name = prepare_tfds_array_record(
      tmp_path, 'VitJaxStreamedVariableSizeTest', 7, 4,
      lambda i: (20 + 3 * i, 30 - 2 * i, 3))
  config = tiny_config(tmp_path, dataset=name, batch_size=4,
                       eval_batch_size=4, image_size=16,
                       input_pipeline='streaming')
  inputs = streaming.StreamingInput(sources.open_dataset(config), config,
                                    parallel.make_mesh(), threads=2)
  images, _ = next(inputs.train_batches(inputs.position(0)))
  assert images.shape == (4, 16, 16, 3)


def test_streaming_trains_as_the_on_device_input(cifar10_binary, tmp_path):
  # Without augmentation and at the stored size both feed the same batches.
  data_dir, _ = cifar10_binary
  records = {}
  for pipeline in ('on_device', 'streaming'):
    config = tiny_config(data_dir, num_epochs=1, augment=False,
                         input_pipeline=pipeline)
    train.train_and_evaluate(config, str(tmp_path / pipeline))
    lines = (tmp_path / pipeline / 'metrics.jsonl').read_text().splitlines()
    records[pipeline] = json.loads(lines[-1])
  for metric in ('train_loss', 'test_loss'):
    assert records['streaming'][metric] == pytest.approx(
        records['on_device'][metric], abs=1e-5)
  assert records['streaming']['test_examples'] == 37

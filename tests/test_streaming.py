"""Streaming input: sources read by index, host crops, sharded batches."""

import json

import jax
import ml_collections
import numpy as np
import pytest

from tests.conftest import png
from tests.conftest import prepare_tfds_array_record
from tests.conftest import random_cifar
from tests.conftest import tiny_config
from vit_jax import input_pipeline
from vit_jax import streaming
from vit_jax import train


def _mesh():
  return jax.make_mesh((jax.device_count(),), ('data',),
                       axis_types=(jax.sharding.AxisType.Auto,))


def _array_input(train_split, test_split, **overrides):
  config = ml_collections.ConfigDict({
      'seed': 3, 'batch_size': 8, 'eval_batch_size': 8, 'image_size': 32,
      'augment': False, **overrides})
  dataset = streaming.StreamingDataset(
      streaming.ArraySource(input_pipeline.Split(*train_split)),
      streaming.ArraySource(input_pipeline.Split(*test_split)), 10)
  return streaming.StreamingInput(dataset, config, _mesh(), threads=2)


def test_inception_crop_box_stays_inside_with_the_official_ranges():
  rng = np.random.default_rng(0)
  for _ in range(500):
    top, left, height, width = streaming.inception_crop_box(40, 60, rng)
    assert 0 <= top and top + height <= 40 and 0 <= left and left + width <= 60
    assert 0.04 <= height * width / (40 * 60) <= 1.0
    assert 0.7 <= width / height <= 1.4


def test_inception_crop_falls_back_to_the_whole_image():
  # No crop of 5-100% of a 1x200 strip has an aspect ratio near 1.
  assert streaming.inception_crop_box(1, 200, np.random.default_rng(0)) == (
      0, 0, 1, 200)


def test_train_image_is_a_resized_crop_reproducible_from_its_seed():
  image = np.random.default_rng(0).integers(0, 256, (50, 70, 3), np.uint8)
  out = [streaming.train_image(image, 16, True, np.random.default_rng([1, 2]))
         for _ in range(2)]
  assert out[0].shape == (16, 16, 3) and out[0].dtype == np.uint8
  np.testing.assert_array_equal(out[0], out[1])
  assert streaming.train_image(image, 70, False, None).shape == (70, 70, 3)
  flips = {
      bool(rng.random() < 0.5) for rng in
      (np.random.default_rng([1, i]) for i in range(20))
  }
  assert flips == {False, True}


def test_process_rows_of_a_single_process_are_the_whole_batch():
  sharding = jax.sharding.NamedSharding(_mesh(),
                                        jax.sharding.PartitionSpec('data'))
  assert streaming.process_rows(sharding, 8) == slice(0, 8)


def test_train_batches_follow_the_seeded_shuffle():
  train_split, test_split = random_cifar(20, 10, 1), random_cifar(5, 10, 2)
  inputs = _array_input(train_split, test_split)
  table = input_pipeline.epoch_batches(3, 2, 20, 8)
  batches = list(inputs.train_batches(2))
  assert len(batches) == len(table) == 2
  for (images, labels), indices in zip(batches, table):
    assert images.sharding.spec == jax.sharding.PartitionSpec('data')
    np.testing.assert_array_equal(images, train_split[0][indices])
    np.testing.assert_array_equal(labels, train_split[1][indices])


def test_eval_batches_cover_the_test_set_once_resized():
  train_split, test_split = random_cifar(20, 10, 1), random_cifar(13, 10, 2)
  inputs = _array_input(train_split, test_split, image_size=16)
  seen = []
  for (images, labels), mask in inputs.eval_batches():
    assert images.shape == (8, 16, 16, 3)
    seen += [int(label) for label, m in zip(labels, mask) if m]
  assert seen == test_split[1].tolist()
  first = next(iter(inputs.eval_batches()))[0][0][0]
  np.testing.assert_array_equal(first, streaming.resize(test_split[0][0], 16))


def test_image_folder_is_listed_and_read_lazily(tmp_path):
  rng = np.random.default_rng(0)
  for split, count in (('train', 3), ('test', 2)):
    for name in ('cat', 'dog'):
      (tmp_path / split / name).mkdir(parents=True)
      for i in range(count):
        (tmp_path / split / name / f'{i}.png').write_bytes(
            png(rng.integers(0, 256, (9 + i, 11, 3), np.uint8)))
  config = ml_collections.ConfigDict(dict(
      dataset='image_folder', data_dir=str(tmp_path), train_examples=0,
      test_examples=3))
  dataset = streaming.open_dataset(config)
  assert (len(dataset.train), len(dataset.test), dataset.num_classes) == (6, 3,
                                                                          2)
  image, label = dataset.train[4]
  assert image.shape == (10, 11, 3) and label == 1
  with pytest.raises(input_pipeline.DatasetError, match='has only 4'):
    streaming.open_dataset(ml_collections.ConfigDict(
        {**config.to_dict(), 'test_examples': 5}))


def test_tfds_array_record_streams_variable_size_images(tmp_path):
  name = prepare_tfds_array_record(
      tmp_path, 'VitJaxVariableSizeTest', 7, 4,
      lambda i: (20 + 3 * i, 30 - 2 * i, 3))
  config = ml_collections.ConfigDict(dict(
      dataset=name, data_dir=str(tmp_path), train_split='train',
      test_split='test', train_examples=0, test_examples=0, seed=0,
      batch_size=4, eval_batch_size=4, image_size=16, augment=True))
  dataset = streaming.open_dataset(config)
  assert (len(dataset.train), len(dataset.test), dataset.num_classes) == (7, 4,
                                                                          3)
  labels = sorted(dataset.train[i][1] for i in range(7))
  assert labels == [0, 0, 0, 1, 1, 2, 2]
  inputs = streaming.StreamingInput(dataset, config, _mesh(), threads=2)
  (images, _), = list(inputs.train_batches(1))
  assert images.shape == (4, 16, 16, 3)

  with pytest.raises(input_pipeline.DatasetError, match='not prepared'):
    streaming.open_dataset(ml_collections.ConfigDict(
        {**config.to_dict(), 'data_dir': str(tmp_path / 'empty')}))
  # The on-device input cannot stack images of different sizes.
  with pytest.raises(input_pipeline.DatasetError,
                     match="varying size.*input_pipeline='streaming'"):
    input_pipeline.load_dataset(config)


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

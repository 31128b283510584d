"""The input interface, the shared batch order, and the on-device input."""

import shutil

import jax
import numpy as np
import pytest

from tests import helpers
from vit_jax import data
from vit_jax.data import input as input_lib
from vit_jax.data import on_device
from vit_jax.data import sources
from vit_jax.errors import DatasetError
from vit_jax.runtime import sharding
from vit_jax.training import train


def test_both_inputs_implement_the_declared_interface():
  for cls in (data.OnDeviceInput, data.StreamingInput):
    assert issubclass(cls, data.Input)
    assert not cls.__abstractmethods__  # every method of the interface


def test_epoch_batches_shuffle_per_epoch_and_are_reproducible():
  first = input_lib.epoch_batches(0, 1, 100, 16)
  assert first.shape == (6, 16) and len(np.unique(first)) == 96
  np.testing.assert_array_equal(first, input_lib.epoch_batches(0, 1, 100, 16))
  assert not np.array_equal(first, input_lib.epoch_batches(0, 2, 100, 16))


def test_eval_batches_cover_every_example_exactly_once():
  for num_examples, batch_size in ((37, 16), (32, 16), (5, 8)):
    indices, mask = input_lib.eval_batches(num_examples, batch_size)
    assert indices.shape == mask.shape and indices.shape[1] == batch_size
    assert sorted(indices[mask == 1].tolist()) == list(range(num_examples))


def test_on_device_batches_continue_from_any_position_and_gather_examples():
  config = helpers.tiny_config('', batch_size=8, eval_batch_size=8,
                               augment=False)
  images, labels = helpers.random_cifar(20, 10, 1)
  split = sources.ArraySource(images, labels)
  inputs = on_device.OnDeviceInput(sources.Dataset(split, split, 10), config,
                                   sharding.make_mesh())  # 2 batches an epoch
  assert inputs.position(3) == {'epoch': 2, 'batch': 1, 'train_examples': 20}
  batches = inputs.train_batches(inputs.position(3))
  epochs = [input_lib.epoch_batches(0, epoch, 20, 8) for epoch in (2, 3)]
  expected = np.concatenate(epochs)[1:]  # from epoch 2's second batch on
  for indices in expected:
    np.testing.assert_array_equal(next(batches), indices)
  # The model's inputs: the batch gathered and normalized.
  indices = np.array([3, 0, 7, 7, 1, 2, 9, 4], np.int32)
  x, y = jax.jit(inputs.model_inputs)(inputs.train_data, indices, None)
  np.testing.assert_array_equal(y, labels[indices])
  expected = (images[indices] / 255 -
              np.asarray(config.pixel_mean)) / (np.asarray(config.pixel_std))
  np.testing.assert_allclose(x, expected, rtol=1e-5, atol=1e-5)


def test_a_run_whose_training_images_changed_is_not_resumed(tmp_path):
  helpers.write_image_folder(tmp_path / 'data', {'train': 16, 'test': 4})
  config = helpers.tiny_config(tmp_path / 'data', dataset='image_folder',
                               image_size=8, num_epochs=1)
  run = tmp_path / 'run'
  train.train_and_evaluate(config, run)
  saved = {p: p.read_bytes() for p in run.rglob('*') if p.is_file()}
  for i in range(16):  # the user adds images to a class
    shutil.copy(tmp_path / 'data/train/cat/0.png',
                tmp_path / f'data/train/cat/new{i}.png')
  with pytest.raises(
      DatasetError, match=f'{run} trained on 32 training examples, and its '
      'data holds 48: the data changed since the run began'):
    train.train_and_evaluate(config, run)
  assert saved == {p: p.read_bytes() for p in run.rglob('*') if p.is_file()}
  # As many images, under a renamed class: not resumed either.
  for i in range(16):
    (tmp_path / f'data/train/cat/new{i}.png').unlink()
  (tmp_path / 'data/train/cat').rename(tmp_path / 'data/train/bird')
  (tmp_path / 'data/test/cat').rename(tmp_path / 'data/test/bird')
  with pytest.raises(
      DatasetError, match=f"{run} was trained with label 0 for the class "
      "'cat', but its data names it 'bird': the data changed since the run "
      'began'):
    train.train_and_evaluate(config, run)
  assert saved == {p: p.read_bytes() for p in run.rglob('*') if p.is_file()}

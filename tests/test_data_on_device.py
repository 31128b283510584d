"""The on-device input: index batches gathered and augmented in the step."""

import jax
import numpy as np

from tests.helpers import random_cifar
from tests.helpers import tiny_config
from vit_jax.data import input as input_lib
from vit_jax.data import on_device
from vit_jax.data import sources
from vit_jax.runtime import sharding


def _input(num_train=20, **overrides):
  config = tiny_config('', batch_size=8, eval_batch_size=8, **overrides)
  train, test = random_cifar(num_train, 10, 1), random_cifar(5, 10, 2)
  dataset = sources.Dataset(sources.ArraySource(*train),
                            sources.ArraySource(*test), 10)
  return on_device.OnDeviceInput(dataset, config, sharding.make_mesh()), train


def test_batches_from_a_mid_epoch_position_continue_into_the_next_epoch():
  inputs, _ = _input()  # 2 batches an epoch
  assert inputs.position(3) == {'epoch': 2, 'batch': 1}
  batches = inputs.train_batches(inputs.position(3))
  expected = [
      input_lib.epoch_batches(0, 2, 20, 8)[1],
      *input_lib.epoch_batches(0, 3, 20, 8)
  ]
  for indices in expected:
    np.testing.assert_array_equal(next(batches), indices)


def test_model_inputs_gather_and_normalize_the_batch():
  inputs, (images, labels) = _input(augment=False)
  indices = np.array([3, 0, 7, 7, 1, 2, 9, 4], np.int32)
  x, y = jax.jit(inputs.model_inputs)(inputs.train_data, indices, None)
  np.testing.assert_array_equal(y, labels[indices])
  config = inputs.config
  expected = (images[indices] / 255 -
              np.asarray(config.pixel_mean)) / (np.asarray(config.pixel_std))
  np.testing.assert_allclose(x, expected, rtol=1e-5, atol=1e-5)

"""The input interface and the batch order both inputs share."""

import numpy as np
import pytest

from vit_jax import data
from vit_jax.data import input as input_lib


def test_both_inputs_implement_the_declared_interface():
  for cls in (data.OnDeviceInput, data.StreamingInput):
    assert issubclass(cls, data.Input)
    assert not cls.__abstractmethods__  # every method of the interface


def test_epoch_batches_shuffle_per_epoch_and_are_reproducible():
  first = input_lib.epoch_batches(0, 1, 100, 16)
  assert first.shape == (6, 16)
  assert len(np.unique(first)) == 96
  np.testing.assert_array_equal(first, input_lib.epoch_batches(0, 1, 100, 16))
  assert not np.array_equal(first, input_lib.epoch_batches(0, 2, 100, 16))


@pytest.mark.parametrize('num_examples,batch_size', [(37, 16), (32, 16),
                                                     (5, 8)])
def test_eval_batches_cover_every_example_exactly_once(num_examples,
                                                       batch_size):
  indices, mask = input_lib.eval_batches(num_examples, batch_size)
  assert indices.shape == mask.shape
  assert indices.shape[1] == batch_size
  assert sorted(indices[mask == 1].tolist()) == list(range(num_examples))

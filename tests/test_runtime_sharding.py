"""The mesh and the placement of host data on it."""

import numpy as np

from vit_jax.runtime import sharding


def test_process_rows_of_a_single_process_are_the_whole_batch():
  batch = sharding.batch_sharded(sharding.make_mesh())
  assert sharding.process_rows(batch, 8) == slice(0, 8)


def test_replicate_places_host_data_on_every_device():
  replicated = sharding.replicated(sharding.make_mesh())
  array = sharding.replicate(np.arange(6).reshape(2, 3), replicated)
  assert array.sharding == replicated
  np.testing.assert_array_equal(array, np.arange(6).reshape(2, 3))


def test_an_fsdp_axis_of_all_devices():
  assert sharding.make_mesh(-1).shape == {'data': 1, 'fsdp': 1}

"""The mesh and the placement of host data on it."""

import numpy as np

from vit_jax.runtime import sharding


def test_the_mesh_its_batch_rows_and_replicated_host_data():
  assert sharding.make_mesh(-1).shape == {'data': 1, 'fsdp': 1}
  mesh = sharding.make_mesh()
  # A single process holds the whole batch.
  assert sharding.process_rows(sharding.batch_sharded(mesh), 8) == slice(0, 8)
  replicated = sharding.replicated(mesh)
  array = sharding.replicate(np.arange(6).reshape(2, 3), replicated)
  assert array.sharding == replicated
  np.testing.assert_array_equal(array, np.arange(6).reshape(2, 3))

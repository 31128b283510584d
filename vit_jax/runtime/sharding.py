"""The mesh: batches split over `data` and `fsdp`, large arrays over `fsdp`."""

import math

import jax
import numpy as np

from vit_jax.runtime import distributed


def make_mesh(fsdp: int = 1) -> jax.sharding.Mesh:
  """All devices on a (`data`, `fsdp`) mesh of `fsdp` columns (-1: one row)."""
  devices = jax.device_count()
  fsdp = devices if fsdp == -1 else fsdp  # config_schema checks it divides
  return jax.make_mesh((devices // fsdp, fsdp), ('data', 'fsdp'),
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)


def replicated(mesh: jax.sharding.Mesh) -> jax.sharding.NamedSharding:
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())


def batch_sharded(mesh: jax.sharding.Mesh) -> jax.sharding.NamedSharding:
  """Leading axis split over every device of the mesh: each holds its rows."""
  return jax.sharding.NamedSharding(
      mesh, jax.sharding.PartitionSpec(tuple(mesh.axis_names)))


# Smaller arrays stay replicated: splitting saves little, costs a collective.
MIN_ELEMENTS_TO_SHARD = 2**14


def _fsdp_sharding(shape: tuple[int, ...],
                   mesh: jax.sharding.Mesh) -> jax.sharding.NamedSharding:
  """Split on the largest axis `fsdp` divides (big_vision's rule), else none."""
  shards, spec = dict(mesh.shape).get('fsdp', 1), [None] * len(shape)
  if shards > 1 and math.prod(shape) >= MIN_ELEMENTS_TO_SHARD:
    for axis in sorted(range(len(shape)), key=lambda a: -shape[a]):
      if shape[axis] % shards == 0:
        spec[axis] = 'fsdp'
        break
  return jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))


def state_shardings(shapes, mesh: jax.sharding.Mesh):
  """`_fsdp_sharding` for every array of a tree of shapes (the train state)."""
  return jax.tree.map(lambda s: _fsdp_sharding(s.shape, mesh), shapes)


def replicate(array: np.ndarray, sharding: jax.sharding.Sharding) -> jax.Array:
  """A global array from host data every process holds, left uncompared."""
  array = np.asarray(array)
  return jax.make_array_from_callback(array.shape, sharding,
                                      lambda index: array[index])


def from_hosts(tree, shardings, source: str):
  """`tree`, read by every process from `source`, as global arrays; checked."""
  tree = jax.device_get(tree)
  # Replicas built from different reads would train apart, silently.
  distributed.check_alike(
      jax.tree.leaves(tree),
      f'read other values from {source} than process 0: every host must read '
      'the same files (a shared filesystem without stale caches, or identical '
      'copies). Start the job again.')
  if isinstance(shardings, jax.sharding.Sharding):
    return jax.tree.map(lambda x: replicate(x, shardings), tree)
  return jax.tree.map(replicate, tree, shardings)


def process_rows(sharding: jax.sharding.Sharding, batch_size: int) -> slice:
  """The rows of a global batch that live on this process's devices."""
  indices = sharding.addressable_devices_indices_map((batch_size,)).values()
  spans = sorted({index[0].indices(batch_size)[:2] for index in indices})
  if any(stop != start for (_, stop), (start, _) in zip(spans, spans[1:])):
    raise ValueError(f'The batch rows of process {jax.process_index()} are '
                     f'not contiguous: {spans}.')
  return slice(spans[0][0], spans[-1][1])

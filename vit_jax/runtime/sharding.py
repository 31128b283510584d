"""The mesh and where arrays live on it.

Two mesh axes, `data` and `fsdp`: the batch is split over all devices (both
axes), and each large parameter and optimizer-state array over the `fsdp`
axis (fully sharded data parallelism; its size 1, the default, replicates
them). In a multi-process job every process runs the same program on the same
global arrays, each holding its own devices' shards.
"""

import math

import jax
import numpy as np

def make_mesh(fsdp: int = 1) -> jax.sharding.Mesh:
  """All devices of all processes on a (`data`, `fsdp`) mesh with `fsdp`
  devices along the second axis (-1: all of them)."""
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


# Smaller arrays (biases, norms, the ViT-Tiny position embedding) stay
# replicated: splitting them saves little memory and costs a collective each.
MIN_ELEMENTS_TO_SHARD = 2**14


def _fsdp_sharding(shape: tuple[int, ...],
                  mesh: jax.sharding.Mesh) -> jax.sharding.NamedSharding:
  """Where an array of `shape` lives in the train state: split along its
  largest axis that the `fsdp` axis divides (as big_vision's `fsdp` rule),
  replicated when none does, when it is small or when `fsdp` has size 1."""
  shards = dict(mesh.shape).get('fsdp', 1)
  spec = [None] * len(shape)
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
  """A global array from host data that every process holds identically.

  Each process fills only its own devices, so `sharding` may span several
  processes (`jax.device_put` would also compare the data across processes
  first, moving all of it over the network).
  """
  array = np.asarray(array)
  return jax.make_array_from_callback(array.shape, sharding,
                                      lambda index: array[index])


def process_rows(sharding: jax.sharding.Sharding, batch_size: int) -> slice:
  """The rows of a global batch that live on this process's devices."""
  spans = sorted({
      (index[0].start or 0,
       batch_size if index[0].stop is None else index[0].stop)
      for index in sharding.addressable_devices_indices_map(
          (batch_size,)).values()
  })
  if any(stop != start for (_, stop), (start, _) in zip(spans, spans[1:])):
    raise ValueError(f'The batch rows of process {jax.process_index()} are '
                     f'not contiguous: {spans}.')
  return slice(spans[0][0], spans[-1][1])

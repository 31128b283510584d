"""The whole dataset on every device, copied once; each step gets a batch of
example indices. Suits small datasets (CIFAR): no per-step host work."""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.data import input as input_lib
from vit_jax.data import sources
from vit_jax.runtime import sharding


class OnDeviceInput(input_lib.Input):
  """Batches are int32 index vectors into `train_data` / `test_data`."""

  default_steps_per_dispatch = 32

  def __init__(self, dataset: sources.Dataset, config, mesh: jax.sharding.Mesh):
    super().__init__(config, mesh)
    self.num_classes = dataset.num_classes
    self._replicated = sharding.replicated(mesh)
    self._batch_sharding = sharding.batch_sharded(mesh)
    self._arrays = tuple(
        sources.to_arrays(split, config.image_size)
        for split in (dataset.train, dataset.test))
    self.train_size, self.test_size = (len(labels)
                                       for _, labels in self._arrays)
    replicate = functools.partial(
        jax.tree.map, lambda a: sharding.replicate(a, self._replicated))
    self.train_data, self.test_data = replicate(self._arrays)
    self._eval_indices, self._eval_masks = replicate(
        input_lib.eval_batches(self.test_size, config.eval_batch_size))

  def fingerprint(self) -> list[np.ndarray]:
    return [*self._arrays[0], *self._arrays[1], self.epoch_table(1)]

  def batch_specs(self):
    spec = lambda size, dtype: jax.ShapeDtypeStruct(
        (size,), dtype, sharding=self._replicated)
    return (spec(self.config.batch_size, jnp.int32),
            spec(self.config.eval_batch_size, jnp.int32),
            spec(self.config.eval_batch_size, jnp.float32))

  def train_batches(self, position: input_lib.Position):
    epoch, first = position['epoch'], position['batch']
    while True:
      yield from self.epoch_table(epoch)[first:]
      epoch, first = epoch + 1, 0

  def eval_batches(self):
    return zip(self._eval_indices, self._eval_masks)

  def model_inputs(self, data, batch, key):
    batch = jax.lax.with_sharding_constraint(batch, self._batch_sharding)
    images, labels = data[0][batch], data[1][batch]
    return self._model_images(images, key,
                              crop_and_flip=self.config.augment), labels

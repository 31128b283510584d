"""The whole dataset on every device, copied once; a batch is its indices."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from vit_jax.data import input as input_lib
from vit_jax.data import sources
from vit_jax.runtime import sharding


class OnDeviceInput(input_lib.Input):
  """Batches are int32 index vectors into `train_data` / `eval_data`."""

  default_steps_per_dispatch = 32

  def __init__(self, dataset: sources.Dataset, config, mesh: jax.sharding.Mesh):
    super().__init__(dataset, config, mesh)
    self._replicated = sharding.replicated(mesh)
    self._batch_sharding = sharding.batch_sharded(mesh)
    splits = {'train': dataset.train, **self._evaluated}
    # Files are held at the arrays' size where a split is arrays (a
    # validation folder beside CIFAR), so that the splits stack; the step
    # resizes every image to config.image_size.
    held = [s for s in splits.values() if isinstance(s, sources.ArraySource)]
    size = held[0].images.shape[1] if held else config.image_size
    self._arrays = {n: sources.to_arrays(s, size) for n, s in splits.items()}
    replicate = functools.partial(
        jax.tree.map, lambda a: sharding.replicate(a, self._replicated))
    evaluated = [self._arrays[name] for name in self.eval_sizes]
    self.train_data, self.eval_data = replicate(
        (self._arrays['train'],
         tuple(np.concatenate(parts) for parts in zip(*evaluated))))
    self._eval_batches, first = {}, 0
    for name, size in self.eval_sizes.items():
      indices, masks = input_lib.eval_batches(size, config.eval_batch_size)
      self._eval_batches[name] = replicate((indices + first, masks))
      first += size

  def fingerprint(self) -> list[np.ndarray]:
    return [*itertools.chain(*self._arrays.values()), self.epoch_table(1)]

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

  def eval_batches(self, split):
    return zip(*self._eval_batches[split])

  def model_inputs(self, data, batch, key):
    batch = jax.lax.with_sharding_constraint(batch, self._batch_sharding)
    images, labels = data[0][batch], data[1][batch]
    return self._model_images(images, key,
                              crop_and_flip=self.config.augment), labels

"""Streaming input, for datasets that do not fit in device memory (ImageNet):
examples are read, cropped and resized on the host for every step, and each
process reads only the examples its own devices compute on.

`config.input_pipeline = 'streaming'` selects it; the default, 'on_device',
copies a small dataset to every device once and is faster for CIFAR-sized
data. Preprocessing is the official fine-tuning code's (`preprocess`): an
Inception crop plus flip for training, a resize for evaluation. Each
example's randomness comes from (seed, epoch, batch, row in the global
batch), so a batch is the same however many processes and threads load it,
and from whichever step a run resumes.
"""

import collections
from collections.abc import Iterator
import concurrent.futures
import os

from absl import logging
import jax
import numpy as np

from vit_jax import parallel
from vit_jax.data import input as input_lib
from vit_jax.data import preprocess
from vit_jax.data import sources


class StreamingInput(input_lib.Input):
  """Batches are sharded global (uint8 images, int32 labels); this process
  loads only its rows, on `threads` threads, `prefetch` steps ahead of the
  one being computed."""

  def __init__(self, dataset: sources.Dataset, config, mesh,
               threads: int | None = None, prefetch: int = 2):
    super().__init__(config, mesh)
    self.dataset = dataset
    self.num_classes = dataset.num_classes
    self.train_size, self.test_size = len(dataset.train), len(dataset.test)
    self.train_data = self.test_data = ()
    self._sharding = parallel.batch_sharded(mesh)
    self.threads = threads or config.input_threads or os.cpu_count()
    self._prefetch = prefetch
    self._train_rows = parallel.process_rows(self._sharding, config.batch_size)
    self._eval_rows = parallel.process_rows(self._sharding,
                                            config.eval_batch_size)
    logging.info('Streaming %d train / %d test examples; this process reads '
                 'rows %d:%d of every training batch of %d.', self.train_size,
                 self.test_size, self._train_rows.start, self._train_rows.stop,
                 config.batch_size)

  def fingerprint(self) -> list[np.ndarray]:
    """The split sizes, the first example of each split (reading all would
    take an epoch) and the shuffle."""
    (first_train, train_label), (first_test, test_label) = (
        self.dataset.train[0], self.dataset.test[0])
    return [
        np.array([self.train_size, self.test_size, self.num_classes,
                  train_label, test_label]), first_train, first_test,
        self.epoch_table(1)
    ]

  def batch_specs(self):
    size = self.config.image_size

    def spec(batch_size):
      return (jax.ShapeDtypeStruct((batch_size, size, size, 3), np.uint8,
                                   sharding=self._sharding),
              jax.ShapeDtypeStruct((batch_size,), np.int32,
                                   sharding=self._sharding))

    mask = jax.ShapeDtypeStruct((self.config.eval_batch_size,), np.float32,
                                sharding=self._sharding)
    return spec(self.config.batch_size), spec(
        self.config.eval_batch_size), mask

  def train_batches(self, position: input_lib.Position) -> Iterator:
    config = self.config

    def load(epoch, batch, row, index):
      rng = np.random.default_rng([config.seed, epoch, batch, row])
      image, label = self.dataset.train[index]
      return preprocess.train_image(image, config.image_size, config.augment,
                                    rng), label

    yield from self._batches(self.table_rows(position), self._train_rows,
                             config.batch_size, load)

  def eval_batches(self) -> Iterator:
    table, masks = input_lib.eval_batches(self.test_size,
                                          self.config.eval_batch_size)

    def load(epoch, batch, row, index):
      del epoch, batch, row
      image, label = self.dataset.test[index]
      return preprocess.resize(image, self.config.image_size), label

    rows = self._eval_rows
    table_rows = ((0, b, indices) for b, indices in enumerate(table))
    batches = self._batches(table_rows, rows, len(masks[0]), load)
    for batch, mask in zip(batches, masks):
      yield batch, self._global(mask[rows], len(mask))

  def model_inputs(self, data, batch, key):
    del data, key  # the examples come in the batch, augmented on the host
    images, labels = batch
    x = preprocess.normalize(images, key=None, augment=False,
                             image_size=self.config.image_size,
                             mean=self.config.pixel_mean,
                             std=self.config.pixel_std)
    return x, labels

  def _global(self, local: np.ndarray, batch_size: int) -> jax.Array:
    return jax.make_array_from_process_local_data(
        self._sharding, local, (batch_size, *local.shape[1:]))

  def _batches(self, table_rows: Iterator, rows: slice, batch_size: int,
               load) -> Iterator:
    """Global (images, labels) of each (epoch, batch, indices) of
    `table_rows`, this process loading its `rows` of each with
    `load(epoch, batch, row, example index)`."""
    with concurrent.futures.ThreadPoolExecutor(self.threads) as pool:
      pending = collections.deque()

      def submit():
        epoch, batch, indices = next(table_rows, (None, None, None))
        if indices is not None:
          pending.append([
              pool.submit(load, epoch, batch, row, indices[row])
              for row in range(rows.start, rows.stop)
          ])

      try:
        for _ in range(self._prefetch):
          submit()
        while True:
          submit()
          if not pending:
            return
          examples = [future.result() for future in pending.popleft()]
          images = np.stack([image for image, _ in examples])
          labels = np.asarray([label for _, label in examples], np.int32)
          yield (self._global(images, batch_size),
                 self._global(labels, batch_size))
      finally:  # a closed generator (a preempted run) waits for no queue
        pool.shutdown(cancel_futures=True)

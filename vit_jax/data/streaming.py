"""Streaming input, read, cropped and resized on the hosts."""

from collections.abc import Iterator
import dataclasses
import functools
import os
import signal
import threading
import time

from absl import flags
from absl import logging
import grain
import jax
import numpy as np

from vit_jax.data import input as input_lib
from vit_jax.data import preprocess
from vit_jax.data import sources
from vit_jax.runtime import sharding


class StreamingInput(input_lib.Input):
  """Sharded global batches of uint8 images and int32 labels, read on hosts."""

  # One batch per compiled call (`Input.stack`): its images are large.
  default_steps_per_dispatch = 1

  def __init__(self, dataset: sources.Dataset, config, mesh,
               workers: int | None = None, prefetch: int = 2):
    super().__init__(dataset, config, mesh)
    self.dataset = dataset
    self.train_data = self.eval_data = ()
    self._sharding = sharding.batch_sharded(mesh)
    workers = config.input_workers if workers is None else workers
    # The cores this process may run on, where the OS says.
    self.threads = (len(os.sched_getaffinity(0)) if hasattr(
        os, 'sched_getaffinity') else os.cpu_count() or 1)
    self.workers = self.threads if workers < 0 else workers
    self._prefetch = prefetch
    self._train_rows = sharding.process_rows(self._sharding, config.batch_size)
    self._eval_rows = sharding.process_rows(self._sharding,
                                            config.eval_batch_size)
    logging.info(
        'Streaming %d train / %s examples; this process reads '
        'rows %d:%d of every training batch of %d.', self.train_size,
        ' / '.join(f'{n} {split}' for split, n in self.eval_sizes.items()),
        self._train_rows.start, self._train_rows.stop, config.batch_size)

  def fingerprint(self) -> list:
    """The split sizes, each split's first example and identity, the shuffle."""
    # The identities (labels and file names) tell a host whose files are
    # labelled otherwise: each process reads its own rows.
    splits = (self.dataset.train, *self._evaluated.values())
    images, labels = zip(*(split[0] for split in splits))
    sizes = (self.train_size, *self.eval_sizes.values(), self.num_classes,
             *labels)
    held = ' '.join(input_lib.identity(split) or '-' for split in splits)
    return [np.array(sizes), *images, self.epoch_table(1), held]

  def batch_specs(self):
    spec = functools.partial(jax.ShapeDtypeStruct, sharding=self._sharding)
    config, size = self.config, self.config.image_size
    train, test = ((spec((n, size, size, 3), np.uint8), spec((n,), np.int32))
                   for n in (config.batch_size, config.eval_batch_size))
    return train, test, spec((config.eval_batch_size,), np.float32)

  def train_batches(self, position: input_lib.Position) -> Iterator:
    config = self.config
    examples = _TrainExamples(self.dataset.train, config.batch_size,
                              self._train_rows, config.image_size,
                              seed=config.seed, augment=config.augment)
    first = (position['epoch'] - 1) * self.steps_per_epoch + position['batch']
    yield from self._batches(examples, first, _ENDLESS, self.workers)

  def eval_batches(self, split) -> Iterator:
    config, rows = self.config, self._eval_rows
    _, masks = input_lib.eval_batches(self.eval_sizes[split],
                                      config.eval_batch_size)
    examples = _EvalExamples(self._evaluated[split], config.eval_batch_size,
                             rows, config.image_size)
    batches = self._batches(examples, 0, len(masks),
                            min(self.workers, len(masks)))
    for batch, mask in zip(batches, masks):
      yield (tuple(self._global(part, len(mask))
                   for part in batch), self._global(mask[rows], len(mask)))

  def model_inputs(self, data, batch, key):
    del data  # the examples come in the batch, cropped on the host
    images, labels = batch
    return self._model_images(images, key, crop_and_flip=False), labels

  def _global(self, local: np.ndarray, batch_size: int) -> jax.Array:
    return jax.make_array_from_process_local_data(
        self._sharding, local, (batch_size, *local.shape[1:]))

  def _batches(self, examples: '_Rows', first: int, stop: int,
               workers: int) -> Iterator:
    """This process's rows of batches `first`..`stop` - 1."""
    per_batch = examples.per_batch
    flat = grain.MapDataset.range(first * per_batch, stop * per_batch)
    if workers:
      # Batched first, so a worker builds whole batches, each crossing to
      # this process as one array.
      batched = flat.map(examples).batch(per_batch)
      if not flags.FLAGS.is_parsed():  # grain reads its flags in the workers
        flags.FLAGS.mark_as_parsed()
      in_order = batched.to_iter_dataset(
          grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
      loaded = in_order.mp_prefetch(
          grain.MultiprocessingOptions(num_workers=workers,
                                       per_worker_buffer_size=self._prefetch),
          worker_init_fn=functools.partial(_worker_setup, os.getpid()))
      # Copied out of grain's shared memory, which jax would alias.
      loaded = loaded.map(lambda batch: tuple(map(np.array, batch)))
    else:
      loaded = flat.map(examples).to_iter_dataset(
          grain.ReadOptions(num_threads=self.threads,
                            prefetch_buffer_size=self._prefetch *
                            per_batch)).batch(per_batch)
    iterator = iter(loaded)
    try:
      yield from iterator
    finally:  # a closed generator (a preempted run) stops the workers at once
      iterator.close()


# Endless, within what grain's range holds.
_ENDLESS = 2**40


def _worker_setup(parent: int, worker_index: int, worker_count: int) -> None:
  """In each worker: ignore SIGTERM and SIGINT; exit when the parent dies."""
  del worker_index, worker_count
  # The training process handles them: a worker killed mid-batch would fail
  # its save.
  signal.signal(signal.SIGTERM, signal.SIG_IGN)
  signal.signal(signal.SIGINT, signal.SIG_IGN)

  def watch():
    while os.getppid() == parent:
      time.sleep(1)
    os._exit(1)  # pylint: disable=protected-access

  threading.Thread(target=watch, daemon=True).start()


_epoch_table = functools.lru_cache(maxsize=2)(input_lib.epoch_batches)

# Module-level dataclasses, so that grain can ship them to its workers.


@dataclasses.dataclass(frozen=True)
class _Rows:
  """This process's `rows` of every global batch."""
  source: sources.Source
  batch_size: int
  rows: slice
  image_size: int

  @property
  def per_batch(self) -> int:
    return self.rows.stop - self.rows.start


@dataclasses.dataclass(frozen=True)
class _TrainExamples(_Rows):
  """Example `i` of this process's training rows, cropped and flipped."""
  seed: int
  augment: bool

  def __call__(self, i: int) -> tuple[np.ndarray, int]:
    step, offset = divmod(int(i), self.per_batch)
    epoch, batch = divmod(step, len(self.source) // self.batch_size)
    row = self.rows.start + offset
    index = _epoch_table(self.seed, epoch + 1, len(self.source),
                         self.batch_size)[batch, row]
    # A batch is the same however it is loaded and wherever a run resumes.
    rng = np.random.default_rng([self.seed, epoch + 1, batch, row])
    image, label = preprocess.train_example(self.source, index, self.image_size,
                                            self.augment, rng)
    return image, np.int32(label)


@dataclasses.dataclass(frozen=True)
class _EvalExamples(_Rows):
  """Example `i` of this process's evaluation rows; past the end, example 0."""

  def __call__(self, i: int) -> tuple[np.ndarray, int]:
    batch, offset = divmod(int(i), self.per_batch)
    index = batch * self.batch_size + self.rows.start + offset
    # Decoded whole, as the official evaluation decodes it.
    image, label = self.source[index if index < len(self.source) else 0]
    return preprocess.resize(image, self.image_size), np.int32(label)

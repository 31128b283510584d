"""The interface both inputs implement, and the batch order they share."""

import abc
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from vit_jax.data import preprocess
from vit_jax.data.dataset import identity
from vit_jax.errors import DatasetError

# Where the next training batch comes from: {'epoch': e (from 1), 'batch': b
# (from 0, within the epoch), 'train_examples': the epochs' size, and where
# held out, 'validation': `dataset.identity` of the validation examples}. JSON,
# so checkpoints store it as it is.
Position = dict[str, int | str]


class Input(abc.ABC):
  """A dataset as batches for the compiled train and eval steps."""

  num_classes: int
  class_names: tuple[str, ...]  # the dataset's; () where it names none
  train_size: int
  # Examples of each split evaluated: 'test', and 'validation' when held out.
  eval_sizes: dict[str, int]
  # Passed to `model_inputs` beside each batch: the examples on device, or ()
  # when batches carry them.
  train_data: Any
  eval_data: Any

  # Train steps per compiled call on an accelerator, unless configured.
  default_steps_per_dispatch: int

  def __init__(self, dataset, config, mesh: jax.sharding.Mesh):
    self.num_classes, self.class_names = dataset.num_classes, dataset.class_names
    self.config, self.mesh = config, mesh
    self._policy = preprocess.device_policy(config)
    self.train_size = len(dataset.train)
    self._evaluated = {'test': dataset.test}
    if dataset.validation is not None:
      self._evaluated['validation'] = dataset.validation
    self._drawn = dataset.validation and identity(dataset.validation)
    self.eval_sizes = {split: len(e) for split, e in self._evaluated.items()}

  @property
  def steps_per_dispatch(self) -> int:
    """Batches per compiled call."""
    # One on a CPU, whose steps ran slower in a loop.
    on_cpu = jax.default_backend() == 'cpu'
    return self.config.steps_per_dispatch or (1 if on_cpu else
                                              self.default_steps_per_dispatch)

  @property
  def steps_per_epoch(self) -> int:
    return self.train_size // self.config.batch_size

  def num_eval_batches(self, split: str) -> int:
    return -(-self.eval_sizes[split] // self.config.eval_batch_size)

  def position(self, step: int) -> Position:
    """Where the batch after `step` finished steps comes from."""
    epoch, batch = divmod(step, self.steps_per_epoch)
    return dict(epoch=epoch + 1, batch=batch, train_examples=self.train_size,
                **({'validation': self._drawn} if self._drawn else {}))

  def check_class_names(self, run_names: tuple[str, ...], source,
                        advice: str) -> None:
    """DatasetError where the data names a label otherwise than a run did."""
    for i, (ours, theirs) in enumerate(zip(run_names, self.class_names)):
      if ours != theirs:
        raise DatasetError(f'{source} was trained with label {i} for the class '
                           f'{ours!r}, but its data names it {theirs!r}: '
                           f'{advice}')

  def check_resumable(self, position: Position, workdir,
                      run_names: tuple[str, ...]) -> None:
    """DatasetError if the run counted other training data or named others."""
    counted = position.get('train_examples', self.train_size)
    restore = ('the data changed since the run began. Restore the data it '
               'read, or pass a new --workdir to start afresh.')
    if counted != self.train_size:
      raise DatasetError(f'{workdir} trained on {counted} training examples, '
                         f'and its data holds {self.train_size}: {restore}')
    self.check_class_names(run_names, workdir, restore)
    self.check_validation(position, workdir, restore)

  def check_validation(self, position: Position, source, advice: str) -> None:
    """DatasetError where a run held out other validation examples."""
    if position.get('validation') not in (None, self._drawn):
      raise DatasetError(f'{source} held out other validation examples than '
                         f'its data gives here: {advice}')

  def epoch_table(self, epoch: int) -> np.ndarray:
    return epoch_batches(self.config.seed, epoch, self.train_size,
                         self.config.batch_size)

  @abc.abstractmethod
  def fingerprint(self) -> list:
    """Arrays or texts every process must hold alike (the data, the shuffle)."""

  @abc.abstractmethod
  def batch_specs(self) -> tuple[Any, Any, jax.ShapeDtypeStruct]:
    """Shapes and shardings of a train batch, an eval batch and its mask."""

  @abc.abstractmethod
  def train_batches(self, position: Position) -> Iterator[Any]:
    """This process's part of each step's batch from `position` on."""

  def stacked_specs(self, count: int) -> Any:
    """Shapes and shardings of `count` train batches stacked."""

    def stacked(spec):
      placement = spec.sharding.update(
          spec=jax.sharding.PartitionSpec(None, *spec.sharding.spec))
      return spec.update(shape=(count, *spec.shape), sharding=placement)

    return jax.tree.map(stacked, self.batch_specs()[0])

  def stack(self, batches: list, count: int) -> Any:
    """Up to `count` `batches` stacked on the devices, zero-padded."""

    def stack(spec, *parts):
      if count == 1:  # without a copy
        local = parts[0][np.newaxis]
      else:
        local = np.zeros((count, *parts[0].shape), parts[0].dtype)
        local[:len(parts)] = parts
      return jax.make_array_from_process_local_data(spec.sharding, local,
                                                    spec.shape)

    return jax.tree.map(stack, self.stacked_specs(count), *batches)

  @abc.abstractmethod
  def eval_batches(self, split: str) -> Iterator[tuple[Any, jax.Array]]:
    """(batch, 0/1 mask) covering every example of `split` once."""

  @abc.abstractmethod
  def model_inputs(self, data, batch,
                   key: jax.Array | None) -> tuple[jax.Array, jax.Array]:
    """(normalized images, labels) of `batch`; `key` None in evaluation."""

  def _model_images(self, images: jax.Array, key: jax.Array | None, *,
                    crop_and_flip: bool) -> jax.Array:
    """uint8 `images` preprocessed for evaluation, or training with `key`."""
    config = self.config
    size_and_statistics = dict(image_size=config.image_size,
                               mean=config.pixel_mean, std=config.pixel_std)
    if key is None:
      return preprocess.eval_input(images, **size_and_statistics)
    return preprocess.train_input(images, key, crop_and_flip=crop_and_flip,
                                  policy=self._policy, **size_and_statistics)


def epoch_batches(seed: int, epoch: int, num_examples: int,
                  batch_size: int) -> np.ndarray:
  """(steps, batch_size) indices, shuffled afresh each epoch, by seed."""
  order = np.random.default_rng([seed, epoch]).permutation(num_examples)
  steps = num_examples // batch_size
  return order[:steps * batch_size].reshape(steps, batch_size).astype(np.int32)


def eval_batches(num_examples: int,
                 batch_size: int) -> tuple[np.ndarray, np.ndarray]:
  """Indices and a 0/1 mask covering every example once, padded."""
  shape = (-(-num_examples // batch_size), batch_size)
  indices = np.arange(shape[0] * batch_size, dtype=np.int32).reshape(shape)
  mask = indices < num_examples
  return np.where(mask, indices, 0), mask.astype(np.float32)

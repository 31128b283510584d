"""Where data enters: `create_input(config, mesh)`.

  sources.py         the dataset a config names, opened by example index
  dataset.py         what the readers return: a Dataset of two Sources
  cifar.py           CIFAR-10/100: statistics, both official formats
  download.py        the official CIFAR releases, fetched into a cache once
  image_folder.py    train/<class>/*.jpg folders, decoded file by file
  tfds_source.py     prepared tensorflow-datasets datasets
  preprocess.py      crops, flips, resizing and normalisation, host and
                     device; the config's device augmentation policy
  auto_augment.py    TrivialAugment and RandAugment (device)
  random_erasing.py  random erasing (device)
  mixing.py          mixup and CutMix of a batch and its soft targets (device)
  input.py           the `Input` interface both inputs implement; the batch
                     order
  on_device.py       small datasets: copied to every device once
  streaming.py       large datasets: read and cropped on the hosts every step
"""

from vit_jax.data import sources
from vit_jax.data.input import Input
from vit_jax.data.on_device import OnDeviceInput
from vit_jax.data.streaming import StreamingInput
from vit_jax.errors import DatasetError
from vit_jax.runtime import distributed

__all__ = ['Input', 'OnDeviceInput', 'StreamingInput', 'create_input']


def create_input(config, mesh) -> Input:
  """`config.input_pipeline`'s input over `config.dataset`, checked to be
  the same on every process and to hold a batch."""
  if config.input_pipeline == 'on_device':
    inputs = OnDeviceInput(sources.open_dataset(config, whole=True), config,
                           mesh)
  else:
    inputs = StreamingInput(sources.open_dataset(config), config, mesh)
  differ = distributed.processes_that_differ(inputs.fingerprint())
  if differ:
    raise DatasetError(
        f'Process(es) {differ} read a different dataset, or shuffle it '
        'differently, than process 0: give every process the same data '
        '(config.data_dir on a shared filesystem or identical copies) and the '
        'same numpy version.')
  if config.batch_size > inputs.train_size:
    raise DatasetError(f'config.batch_size={config.batch_size} is larger than '
                       f'the {inputs.train_size} training examples.')
  return inputs

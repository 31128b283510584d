"""Where data enters: `create_input(config, mesh)`. sources.py opens the
dataset; on_device.py (small datasets, copied to every device once) or
streaming.py (read and cropped on the hosts every step) feeds it."""

from vit_jax.data import sources
from vit_jax.data.input import Input
from vit_jax.data.on_device import OnDeviceInput
from vit_jax.data.streaming import StreamingInput
from vit_jax.errors import DatasetError
from vit_jax.runtime import distributed


def create_input(config, mesh) -> Input:
  """`config.input_pipeline`'s input, the same on every process."""
  on_device = config.input_pipeline == 'on_device'
  kind = OnDeviceInput if on_device else StreamingInput
  inputs = kind(sources.open_dataset(config, whole=on_device), config, mesh)
  distributed.check_alike(
      inputs.fingerprint(), 'read a different dataset, or shuffle it '
      'differently, than process 0: give every process the same data '
      '(config.data_dir on a shared filesystem or identical copies) and the '
      'same numpy version.', DatasetError)
  if config.batch_size > inputs.train_size:
    raise DatasetError(f'config.batch_size={config.batch_size} is larger than '
                       f'the {inputs.train_size} training examples.')
  return inputs

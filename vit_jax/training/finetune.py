"""Starting a run from pre-trained parameters (`config.init_from`)."""

from typing import Any

from absl import logging
import jax
import numpy as np

from vit_jax import models
from vit_jax.checkpoints import reading
from vit_jax.errors import CheckpointError
from vit_jax.errors import ConfigError
from vit_jax.formats import params as params_lib


def check_init_from(config) -> Any:
  """`config.init_from`'s host arrays, checked to fit `config`'s model."""
  model = models.from_config(config, num_classes=1)  # the head starts afresh
  return _read(config, params_lib.param_shapes(model, config.image_size))


def pretrained_params(config, fresh_params, pretrained=None) -> dict:
  """`check_init_from`'s `pretrained` fitted to the model of `fresh_params`."""
  fresh = jax.device_get(fresh_params)
  if pretrained is None:
    pretrained = _read(config, fresh)
  adapted = params_lib.adapt_params(pretrained, fresh)
  logging.info('Initialized from %s.', config.init_from)
  return adapted


def _read(config, expected) -> Any:
  """`config.init_from`'s arrays; ConfigError unless they fit `expected`."""
  try:
    # The run's ViT names the heads a timm or transformers file fuses.
    heads_of = config.model if config.model in models.VIT_FIELDS else None
    params = jax.device_get(
        reading.load_params(config.init_from, model_name=heads_of))
    trained_on = reading.trained_pixels(config.init_from)
    ours = tuple(map(tuple, (config.pixel_mean, config.pixel_std)))
    if trained_on is not None and not np.allclose(trained_on, ours):
      # Allowed (fine-tuning adapts), but rarely meant.
      npz = reading.source_kind(config.init_from) == reading.NPZ
      logging.warning(
          '%s %s pixels normalized with mean %s and std %s; this run '
          'normalizes with %s and %s. To feed it what it learned on, pass %s.',
          config.init_from, 'states no normalization; if it is a released '
          '.npz, it was trained on' if npz else 'was trained on', *trained_on,
          *ours, reading.pixel_flags(trained_on))
    _check_architecture(config, params, expected)
    params_lib.check_fit(params, expected)
  except CheckpointError as e:
    raise ConfigError(f'config.init_from={config.init_from!r}: {e}') from e
  return params


def _check_architecture(config, pretrained, expected):
  """ConfigError unless `pretrained` is a model of `expected`'s shapes."""
  theirs, ours = map(params_lib.vit_architecture, (pretrained, expected))
  if theirs != ours:
    name = theirs and models.vit_of_architecture(theirs)
    overrides = ' with its model_overrides' if config.model_overrides else ''
    setting = (f'--config.model={name}'
               if name else '--config.model and --config.model_overrides')
    if name and overrides:
      setting += ' without model_overrides'
    raise ConfigError(
        f'config.init_from={config.init_from!r} holds '
        f'{_described(theirs)}{f" ({name})" if name else ""}, but this '
        f"run's model (config.model={config.model!r}{overrides}) is "
        f'{_described(ours)}: pass a checkpoint of this model, or set '
        f'{setting} to fine-tune the one it holds.')


def _described(architecture: dict | None) -> str:
  return ('a model that is no ViT' if architecture is None else
          params_lib.describe_architecture(architecture))

"""Starting a run from pre-trained parameters, the way the paper fine-tunes:
`config.init_from` read (`checkpoint.load_params`) and fitted to the new
model (`formats.params.adapt_params`), and the paper's optimizer recipe.
"""

from absl import logging
import jax

from vit_jax import checkpoint
from vit_jax.errors import CheckpointError
from vit_jax.errors import ConfigError
from vit_jax.formats import params as params_lib


def pretrained_params(config, model, fresh_params) -> dict:
  """`config.init_from` (a run directory or a released .npz) fitted to
  `model`, whose freshly initialised parameters are `fresh_params`; a
  ConfigError names what does not fit."""
  try:
    pretrained = checkpoint.load_params(config.init_from)
    adapted = params_lib.adapt_params(
        pretrained, jax.device_get(fresh_params),
        num_prefix_tokens=len(getattr(model, 'prefix_tokens', ())))
  except CheckpointError as e:
    raise ConfigError(f'config.init_from={config.init_from!r}: {e}') from e
  logging.info('Initialised from %s.', config.init_from)
  return adapted


def use_paper_recipe(config) -> None:
  """Sets `config`'s optimizer to the paper's fine-tuning recipe (Sec. 3.1,
  App. B.1.1): SGD with momentum 0.9, no weight decay, gradients clipped to
  global norm 1, no label smoothing, no dropout (the official configs), and
  cosine decay after a linear warmup. The learning rate, length and batch
  stay the caller's."""
  config.optimizer = 'sgd'
  config.momentum = 0.9
  config.weight_decay = 0.0
  config.grad_clip_norm = 1.0
  config.label_smoothing = 0.0
  config.lr_decay = 'cosine'
  config.model_overrides.dropout_rate = 0.0

"""Every model by name (`create_model`) or from a config (`from_config`)."""

import dataclasses
import difflib
import functools
import numbers
from typing import Callable

import flax.linen as nn
import jax.numpy as jnp
import numpy as np

from vit_jax.errors import ConfigError
from vit_jax.models.cnn import SimpleCNN
from vit_jax.models.cnn import SmallResNet
from vit_jax.models.vit import VisionTransformer

# What `_vit`'s positional arguments set.
_SIZES = ('patch_size', 'hidden_size', 'num_layers', 'num_heads', 'mlp_dim')


def _vit(*sizes, dropout_rate=0.0, **hybrid):
  # Dropout rates are the official configs' (google-research/vision_transformer
  # vit_jax/configs/models.py); attention dropout is 0 in all of them.
  return functools.partial(VisionTransformer, **dict(zip(_SIZES, sizes)),
                           dropout_rate=dropout_rate, **hybrid)


_MODELS: dict[str, Callable[..., nn.Module]] = {
    'ViT-Ti_16': _vit(16, 192, 12, 3, 768),
    'ViT-S_16': _vit(16, 384, 12, 6, 1536),
    'ViT-S_32': _vit(32, 384, 12, 6, 1536),
    'ViT-B_8': _vit(8, 768, 12, 12, 3072),
    'ViT-B_16': _vit(16, 768, 12, 12, 3072),
    'ViT-B_32': _vit(32, 768, 12, 12, 3072),
    'ViT-L_16': _vit(16, 1024, 24, 16, 4096, dropout_rate=0.1),
    'ViT-L_32': _vit(32, 1024, 24, 16, 4096),
    'ViT-H_14': _vit(14, 1280, 32, 16, 5120, dropout_rate=0.1),
    # The hybrid: ViT-B on 1x1 patches of a ResNet-50-like stem's 14x14x1024
    # feature map (stages (3, 4, 9), not ResNet-50's (3, 4, 6, 3), so the stem
    # downsamples by 16). Like the official config, no representation layer.
    'R50+ViT-B_16': _vit(1, 768, 12, 12, 3072, dropout_rate=0.1,
                         resnet_stages=(3, 4, 9), resnet_width_factor=1),
    # The small-data study's ViT-Tiny for 32x32 CIFAR images (64 patches).
    # The study does not state its dropout; 0.1 is the usual choice for such
    # small ViTs and a config can override it.
    'ViT-Tiny-CIFAR_4': _vit(4, 128, 6, 4, 512, dropout_rate=0.1),
    'SimpleCNN': SimpleCNN,
    'SmallResNet': SmallResNet,
}

MODEL_NAMES = tuple(_MODELS)
# The fields each registered ViT sets (patch_size, hidden_size, ...).
VIT_FIELDS = {
    name: dict(factory.keywords) for name, factory in _MODELS.items()
    if isinstance(factory, functools.partial)
}

# Fields of a ViT's config.model_overrides that say how it trains, not what
# it is (an MAE's decoder, locality guidance's blocks), with their defaults:
# `training_fields` reads them, `from_config` leaves them out.
TRAINING_FIELDS = dict(mae_mask_ratio=0.0, mae_decoder_depth=8,
                       mae_decoder_width=512, guided_blocks=(),
                       guidance_widths=())


def vit_of_architecture(architecture: dict) -> str | None:
  """The registered ViT of `formats.params.vit_architecture`'s, if any."""
  return next((name for name, fields in VIT_FIELDS.items()
               if architecture == {key: fields.get(key)
                                   for key in architecture}), None)


def _settable_fields(factory) -> list[dataclasses.Field]:
  """The fields an override may set: all but linen's own and num_classes."""
  fields = dataclasses.fields(getattr(factory, 'func', factory))
  return [f for f in fields if f.name not in ('parent', 'name', 'num_classes')]


def default_fields(name: str) -> dict:
  """The fields of the registered model `name`; empty for no such model."""
  if (factory := _MODELS.get(name)) is None:
    return {}
  values = {
      f.name: f.default for f in _settable_fields(factory)
      if f.default is not dataclasses.MISSING
  }
  if isinstance(factory, functools.partial):
    values.update(factory.keywords, **TRAINING_FIELDS)
  return values


def training_fields(config) -> dict:
  """`TRAINING_FIELDS` as `config` sets them (all defaults for a CNN)."""
  overrides = config.model_overrides
  return {n: overrides.get(n, d) for n, d in TRAINING_FIELDS.items()}


def model_variables(params, batch_stats=None) -> dict:
  """The variables to apply a model with; `batch_stats` only if not empty."""
  return dict(params=params,
              **({'batch_stats': batch_stats} if batch_stats else {}))


# What an override of a field whose default is of the key's type must be
# (an integer field takes no float, a float field an integer too; numpy's
# numbers, as an experiment's runner may pass them, are numbers).
_KINDS = {
    bool: ('a boolean', (bool, np.bool_)),
    int: ('an integer', (numbers.Integral,)), float:
        ('a number', (numbers.Real,)), str: ('a string', (str,))
}


def create_model(name: str, num_classes: int, **overrides) -> nn.Module:
  """The linen module registered as `name`, `overrides` setting its fields."""
  if name not in _MODELS:
    raise ValueError(f'Unknown model {name!r}. Known models: '
                     f'{", ".join(MODEL_NAMES)}.')
  factory = _MODELS[name]
  fields = {f.name for f in _settable_fields(factory)}
  if unknown := sorted(set(overrides) - fields):
    guesses = [
        g for u in unknown for g in difflib.get_close_matches(u, fields, n=1)
    ]
    guess = f' Did you mean {", ".join(guesses)}?' if guesses else ''
    raise ValueError(f'{name} has no field(s) {", ".join(unknown)}.{guess} '
                     f'Its fields: {", ".join(sorted(fields))}.')
  # An override of another kind than its field's default is refused
  # (`--config.model_overrides.num_layers=abc` arrives as a string).
  defaults = default_fields(name)
  for field, value in overrides.items():
    # A default of None, a tuple or a dtype: the model checks the value.
    if type(default := defaults.get(field)) not in _KINDS:
      continue
    kind, accepted = _KINDS[type(default)]
    # A bool is a numbers.Integral, yet no value for a number field.
    if not isinstance(value, accepted) or (type(default) is not bool and
                                           isinstance(value, (bool, np.bool_))):
      raise ValueError(f'{field}={value!r}: {name}\'s {field} is {kind} '
                       f'(default {default!r}).')
  return factory(num_classes=num_classes, **overrides)


def from_config(config, num_classes: int) -> nn.Module:
  """`config.model` with `config.model_overrides`, in `config.dtype`."""
  overrides = dict(config.model_overrides)
  if config.model in VIT_FIELDS:
    for name in TRAINING_FIELDS:
      overrides.pop(name, None)
  try:
    model = create_model(config.model, num_classes,
                         dtype=jnp.dtype(config.dtype), **overrides)
  except (ValueError, TypeError) as e:
    raise ConfigError(f'config.model_overrides: {e}') from e
  if isinstance(model, VisionTransformer):
    try:
      model.check_image_size(config.image_size, config.image_size)
    except ValueError as e:
      raise ConfigError(f'config.image_size={config.image_size} does not fit '
                        f'{config.model}: {e}') from e
  return model

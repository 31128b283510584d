"""Hugging Face transformers' ViTForImageClassification folder, which
`from_pretrained(DIR)` reads; we write tanh GELU and eps 1e-6 into its
config so it computes our logits. A bare ViTModel reads in without a head.
"""

import json
import pathlib
import re
from typing import Any

from absl import logging
import jax

from vit_jax import models
from vit_jax.errors import CheckpointError
from vit_jax.formats import params as params_lib
from vit_jax.formats import safetensors_file
from vit_jax.formats import torch_layout as torch
from vit_jax.formats import vit_model
from vit_jax.runtime import files

NAME = "transformers' ViTForImageClassification"
PREPROCESSOR_CONFIG = 'preprocessor_config.json'
_LAYER = re.compile(r'(?:vit\.)?encoder\.layer\.(\d+)\.')
# ViTForImageClassification's names; a bare ViTModel's lack the prefix.
_PREFIX = 'vit.'
_HEAD = ('classifier.weight', 'classifier.bias')
_LAYER_PREFIX = _PREFIX + 'encoder.layer.{i}.'
_ATTENTION = 'MultiHeadDotProductAttention_0/'

_TOP = [
    torch.Rule('cls', _PREFIX + 'embeddings.cls_token'),
    torch.Rule('Transformer/posembed_input/pos_embedding',
               _PREFIX + 'embeddings.position_embeddings'),
    torch.Rule('embedding/kernel',
               _PREFIX + 'embeddings.patch_embeddings.projection.weight',
               'conv2d'),
    torch.Rule('embedding/bias',
               _PREFIX + 'embeddings.patch_embeddings.projection.bias'),
    torch.Rule('Transformer/encoder_norm/scale', _PREFIX + 'layernorm.weight'),
    torch.Rule('Transformer/encoder_norm/bias', _PREFIX + 'layernorm.bias'),
    # A ViTModel's pooler (Dense, then tanh, on the class token) is the
    # official pre-logits layer; ViTForImageClassification has none.
    torch.Rule('pre_logits/kernel', _PREFIX + 'pooler.dense.weight', 'linear'),
    torch.Rule('pre_logits/bias', _PREFIX + 'pooler.dense.bias'),
    torch.Rule('head/kernel', 'classifier.weight', 'linear'),
    torch.Rule('head/bias', 'classifier.bias'),
]
_BLOCK_RULES = [
    torch.Rule('LayerNorm_0/scale', _LAYER_PREFIX + 'layernorm_before.weight'),
    torch.Rule('LayerNorm_0/bias', _LAYER_PREFIX + 'layernorm_before.bias'),
    *(torch.Rule(f'{_ATTENTION}{name}/{array}', _LAYER_PREFIX +
                 f'attention.attention.{name}.{torch_name}', layout)
      for name in ('query', 'key', 'value')
      for array, torch_name, layout in (('kernel', 'weight', 'heads_in'),
                                        ('bias', 'bias', 'heads_bias'))),
    torch.Rule(_ATTENTION + 'out/kernel',
               _LAYER_PREFIX + 'attention.output.dense.weight', 'heads_out'),
    torch.Rule(_ATTENTION + 'out/bias',
               _LAYER_PREFIX + 'attention.output.dense.bias'),
    torch.Rule('LayerNorm_1/scale', _LAYER_PREFIX + 'layernorm_after.weight'),
    torch.Rule('LayerNorm_1/bias', _LAYER_PREFIX + 'layernorm_after.bias'),
    torch.Rule('MlpBlock_0/Dense_0/kernel',
               _LAYER_PREFIX + 'intermediate.dense.weight', 'linear'),
    torch.Rule('MlpBlock_0/Dense_0/bias',
               _LAYER_PREFIX + 'intermediate.dense.bias'),
    torch.Rule('MlpBlock_0/Dense_1/kernel',
               _LAYER_PREFIX + 'output.dense.weight', 'linear'),
    torch.Rule('MlpBlock_0/Dense_1/bias', _LAYER_PREFIX + 'output.dense.bias'),
]


def is_state(keys) -> bool:
  """Whether arrays named `keys` look like a transformers ViT's."""
  return any(
      key.startswith(('vit.embeddings.', 'embeddings.patch_')) for key in keys)


def to_state(params: dict) -> dict[str, Any]:
  """Our tree as ViTForImageClassification's state dict."""
  return torch.to_state(params, _TOP, _BLOCK_RULES)


def _with_prefix(state: dict) -> dict:
  """A bare ViTModel's names as ViTForImageClassification's."""
  return {
      key if key.startswith(_PREFIX) or key in _HEAD else _PREFIX + key: value
      for key, value in state.items()
  }


def _expected_model(state: dict, num_heads: int,
                    source: str) -> tuple[models.VisionTransformer, int]:
  """The ViT `state` should be, from a few of its arrays' shapes."""
  p = _PREFIX
  for key in ('embeddings.position_embeddings',
              'embeddings.patch_embeddings.projection.weight',
              'embeddings.cls_token',
              'encoder.layer.0.intermediate.dense.weight', 'layernorm.weight'):
    if p + key not in state:
      raise CheckpointError(f'{source} is not a transformers ViT: it has no '
                            f'{key}.')
  positions = state[p + 'embeddings.position_embeddings']
  patch = state[p + 'embeddings.patch_embeddings.projection.weight'].shape[-1]
  pooler = state.get(p + 'pooler.dense.bias')
  model = models.VisionTransformer(
      num_classes=state['classifier.weight'].shape[0]
      if 'classifier.weight' in state else 1, patch_size=patch,
      hidden_size=positions.shape[-1], num_layers=1 + max(
          int(_LAYER.match(key).group(1))
          for key in state if _LAYER.match(key)), num_heads=num_heads,
      mlp_dim=state[p + 'encoder.layer.0.intermediate.dense.weight'].shape[0],
      representation_size=None if pooler is None else pooler.shape[0])
  side = vit_model.grid_side(positions.shape[1], 1, source,
                             'position_embeddings')
  return model, side * patch


def from_state(state: dict, num_heads: int, source: str) -> dict:
  """A transformers ViT's state dict as our tree; CheckpointError naming the
  key of any array missing, unexpected or of the wrong shape."""
  state = _with_prefix(state)
  model, image_size = _expected_model(state, num_heads, source)
  shapes = params_lib.param_shapes(model, image_size)
  described = params_lib.describe_architecture(
      params_lib.vit_architecture(shapes))
  torch.check_state(state, jax.eval_shape(to_state, shapes), optional=_HEAD,
                    source=source,
                    target=f"transformers' layout of {described}")
  return torch.from_state(state, _TOP, _BLOCK_RULES, model.num_layers,
                          num_heads)


def config(model: models.VisionTransformer, image_size: int) -> dict:
  """`ViTConfig` for `model`, as config.json."""
  labels = {str(i): f'LABEL_{i}' for i in range(model.num_classes)}
  return {
      'architectures': ['ViTForImageClassification'
                       ], 'model_type': 'vit', 'hidden_size': model.hidden_size,
      'num_hidden_layers': model.num_layers, 'num_attention_heads':
          model.num_heads, 'intermediate_size': model.mlp_dim,
      'hidden_act': 'gelu_pytorch_tanh', 'layer_norm_eps': 1e-6,
      'hidden_dropout_prob': 0.0, 'attention_probs_dropout_prob': 0.0,
      'initializer_range': 0.02, 'image_size': image_size, 'patch_size':
          model.patch_size, 'num_channels': 3, 'qkv_bias': True,
      'encoder_stride': model.patch_size, 'id2label': labels, 'label2id': {
          label: int(i) for i, label in labels.items()
      }, 'torch_dtype': 'float32',
  }


def preprocessor_config(image_size: int, pixels: tuple[tuple, tuple]) -> dict:
  """`ViTImageProcessor`'s config, normalizing by `pixels` (mean, std)."""
  mean, std = pixels
  return {
      'image_processor_type': 'ViTImageProcessor',
      'do_resize': True,
      'size': {'height': image_size, 'width': image_size},
      'resample': 2,  # bilinear
      'do_rescale': True,
      'rescale_factor': 1 / 255,
      'do_normalize': True,
      'image_mean': [float(x) for x in mean],
      'image_std': [float(x) for x in std],
  }


def check_exportable(model: models.VisionTransformer) -> None:
  vit_model.check_exportable(
      model,
      NAME,
      {
          **vit_model.common_unsupported(model),
          # transformers' ViTHybrid is deprecated and its BiT stem not ours.
          "ResNet stem of the hybrid (--format=timm has it)":
              model.resnet_stages is not None,
          "'gap' head (it reads the class token)": model.classifier == 'gap',
          'pre-logits layer (representation_size)': model.representation_size is
                                                    not None,
      })


FILES = (safetensors_file.WEIGHTS_NAME, 'config.json', PREPROCESSOR_CONFIG)


def write(directory: pathlib.Path, params: dict,
          model: models.VisionTransformer, image_size: int,
          pixels: tuple[tuple, tuple] = vit_model.RELEASED_PIXELS) -> None:
  """transformers' folder in `directory`; `pixels`: the training (mean, std)."""
  check_exportable(model)
  directory = pathlib.Path(directory)
  safetensors_file.write(directory / safetensors_file.WEIGHTS_NAME,
                         to_state(jax.device_get(params)),
                         metadata={'format': 'pt'})
  files.write_atomically(directory / 'config.json',
                         json.dumps(config(model, image_size), indent=2))
  files.write_atomically(
      directory / PREPROCESSOR_CONFIG,
      json.dumps(preprocessor_config(image_size, pixels), indent=2))


def pixels(path: pathlib.Path) -> tuple[tuple, tuple]:
  """The (mean, std) of a folder's preprocessor_config.json, else [-1, 1]."""
  preprocessor = vit_model.folder_config(path, PREPROCESSOR_CONFIG) or {}
  if preprocessor.get('do_normalize', True) is False:
    return (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
  return vit_model.checked_pixels(preprocessor.get('image_mean'),
                                  preprocessor.get('image_std'),
                                  str(pathlib.Path(path) / PREPROCESSOR_CONFIG),
                                  vit_model.RELEASED_PIXELS)


def read(path: pathlib.Path, model_name: str | None) -> dict:
  """Our tree from a transformers ViT folder or its model.safetensors."""
  path = pathlib.Path(path)
  config_dict = vit_model.folder_config(path, 'config.json') or {}
  if path.is_dir():
    path = path / safetensors_file.WEIGHTS_NAME
  state = _with_prefix(safetensors_file.read(path))
  # transformers' defaults: exact GELU, eps 1e-12.
  act = config_dict.get('hidden_act', 'gelu')
  eps = config_dict.get('layer_norm_eps', 1e-12)
  if config_dict and (act not in ('gelu_pytorch_tanh', 'gelu_new', 'gelu_fast')
                      or eps != 1e-6):
    logging.warning(
        '%s uses hidden_act=%r and layer_norm_eps=%g; vit_jax computes the '
        'official model (tanh GELU, eps 1e-6): its logits move slightly '
        '(docs/checkpoints.md).', path, act, eps)
  key = _PREFIX + 'embeddings.position_embeddings'
  if key not in state:
    raise CheckpointError(f'{path} is not a transformers ViT: it has no '
                          'embeddings.position_embeddings.')
  heads = vit_model.num_heads(state[key].shape[-1], model_name=model_name,
                              stated=config_dict.get('num_attention_heads'),
                              source=str(path))
  return from_state(state, heads, str(path))

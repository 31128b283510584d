"""transformers' ViTForImageClassification folder (`from_pretrained(DIR)`)."""

import pathlib
import re
from typing import Any

from absl import logging

from vit_jax import models
from vit_jax.formats import safetensors_file
from vit_jax.formats import torch_layout as torch
from vit_jax.formats import vit_model

NAME = "transformers' ViTForImageClassification"
PREPROCESSOR_CONFIG = 'preprocessor_config.json'
_LAYER = re.compile(r'vit\.encoder\.layer\.(\d+)\.')
# ViTForImageClassification's names; a bare ViTModel's lack the prefix.
_PREFIX = 'vit.'
_HEAD = ('classifier.weight', 'classifier.bias')
_TOP = {
    'cls': _PREFIX + 'embeddings.cls_token',
    torch.POSITIONS: _PREFIX + 'embeddings.position_embeddings',
    'embedding': _PREFIX + 'embeddings.patch_embeddings.projection',
    'Transformer/encoder_norm': _PREFIX + 'layernorm',
    # A ViTModel's pooler (Dense, then tanh, on the class token) is the
    # official pre-logits layer; ViTForImageClassification has none.
    'pre_logits': _PREFIX + 'pooler.dense',
    'head': 'classifier',
}
_BLOCK_NAMES = {
    'LayerNorm_0': 'layernorm_before',
    torch.ATTENTION + 'query': 'attention.attention.query',
    torch.ATTENTION + 'key': 'attention.attention.key',
    torch.ATTENTION + 'value': 'attention.attention.value',
    torch.ATTENTION + 'out': 'attention.output.dense',
    'LayerNorm_1': 'layernorm_after',
    'MlpBlock_0/Dense_0': 'intermediate.dense',
    'MlpBlock_0/Dense_1': 'output.dense',
}

# Our fields as its config.json names them.
_STATED = dict(hidden_size='hidden_size', num_layers='num_hidden_layers',
               num_heads='num_attention_heads', mlp_dim='intermediate_size')


def _name(module: str) -> str:
  return torch.module_name(module, _TOP, _BLOCK_NAMES,
                           _PREFIX + 'encoder.layer.{}.')


def is_state(keys) -> bool:
  """Whether arrays named `keys` look like a transformers ViT's."""
  return any(
      key.startswith(('vit.embeddings.', 'embeddings.patch_')) for key in keys)


def to_state(params: dict) -> dict[str, Any]:
  """Our tree as ViTForImageClassification's state dict."""
  return torch.to_state(params, _name)


def config(model: models.VisionTransformer, image_size: int,
           class_names: tuple[str, ...] = ()) -> dict:
  """`ViTConfig` for `model`, as config.json; labels `class_names` if given."""
  names = class_names or [f'LABEL_{i}' for i in range(model.num_classes)]
  labels = {str(i): name for i, name in enumerate(names)}
  ids = {label: int(i) for i, label in labels.items()}
  return dict(architectures=['ViTForImageClassification'], model_type='vit',
              hidden_size=model.hidden_size, num_hidden_layers=model.num_layers,
              num_attention_heads=model.num_heads,
              intermediate_size=model.mlp_dim, hidden_act='gelu_pytorch_tanh',
              layer_norm_eps=1e-6, hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0, initializer_range=0.02,
              image_size=image_size, patch_size=model.patch_size,
              num_channels=3, qkv_bias=True, encoder_stride=model.patch_size,
              id2label=labels, label2id=ids, torch_dtype='float32')


def preprocessor_config(image_size: int, pixels: tuple[tuple, tuple]) -> dict:
  """`ViTImageProcessor`'s config, normalizing by `pixels` (mean, std)."""
  mean, std = (list(map(float, p)) for p in pixels)
  # resample 2: PIL's bilinear.
  return dict(image_processor_type='ViTImageProcessor', do_resize=True,
              size=dict(height=image_size, width=image_size), resample=2,
              do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
              image_mean=mean, image_std=std)


FILES = (safetensors_file.WEIGHTS_NAME, 'config.json', PREPROCESSOR_CONFIG)


def write(
    directory: pathlib.Path, params: dict, model: models.VisionTransformer,
    image_size: int, pixels: tuple[tuple, tuple] = vit_model.RELEASED_PIXELS,
    class_names: tuple[str, ...] = ()
) -> None:
  """transformers' folder in `directory`; `pixels`: the training (mean, std)."""
  # transformers' ViTHybrid is deprecated and its BiT stem not ours.
  vit_model.check_exportable(
      model, NAME, {
          **vit_model.folder_lacks(model), 'ResNet stem of the hybrid (--format=timm has it)':
              model.resnet_stages is not None,
          "'gap' head (it reads the class token)": model.classifier == 'gap',
      })
  torch.write_folder(
      directory, to_state(params), {
          'config.json': config(model, image_size, class_names),
          PREPROCESSOR_CONFIG: preprocessor_config(image_size, pixels)
      }, metadata={'format': 'pt'})


def pixels(path: pathlib.Path) -> tuple[tuple, tuple]:
  """The (mean, std) of a folder's preprocessor_config.json, else [-1, 1]."""
  preprocessor = vit_model.folder_config(path, PREPROCESSOR_CONFIG) or {}
  if preprocessor.get('do_normalize', True) is False:
    return (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
  return vit_model.checked_pixels(preprocessor.get('image_mean'),
                                  preprocessor.get('image_std'),
                                  str(pathlib.Path(path) / PREPROCESSOR_CONFIG),
                                  vit_model.RELEASED_PIXELS)


def class_names(path: pathlib.Path) -> tuple[str, ...]:
  """The folder's `id2label`, unless transformers' default `LABEL_i`."""
  labels = (vit_model.folder_config(path, 'config.json') or {}).get('id2label')
  if not isinstance(labels, dict):
    return ()
  names = [labels.get(str(i)) for i in range(len(labels))]
  unnamed = [f'LABEL_{i}' for i in range(len(names))]  # transformers' default
  return () if None in names or names == unnamed else tuple(map(str, names))


def read(path: pathlib.Path, model_name: str | None) -> dict:
  """Our tree from a transformers ViT folder or its model.safetensors."""
  config_dict, path, state = torch.read_weights(path)
  config_dict = config_dict or {}
  # transformers' defaults: exact GELU, eps 1e-12.
  act = config_dict.get('hidden_act', 'gelu')
  eps = config_dict.get('layer_norm_eps', 1e-12)
  if config_dict and (act not in ('gelu_pytorch_tanh', 'gelu_new', 'gelu_fast')
                      or eps != 1e-6):
    logging.warning(
        '%s uses hidden_act=%r and layer_norm_eps=%g; vit_jax computes the '
        'official model (tanh GELU, eps 1e-6): its logits move slightly '
        '(docs/checkpoints.md).', path, act, eps)
  # A bare ViTModel's names as ViTForImageClassification's.
  state = {
      key if key.startswith(_PREFIX) or key in _HEAD else _PREFIX + key: value
      for key, value in state.items()
  }
  pooler = state.get(_PREFIX + 'pooler.dense.bias')
  shapes = torch.expected_shapes(
      state, _name, _LAYER, to_state, library='transformers',
      layout="transformers' layout", model_name=model_name, stated=_STATED,
      config=config_dict, source=str(path),
      representation_size=None if pooler is None else pooler.shape[0])
  return torch.from_state(state, shapes, _name)

"""timm's VisionTransformer hub folder (`create_model('local-dir:DIR')`)."""

import pathlib
import re
from typing import Any

from absl import logging
import jax.numpy as jnp
import numpy as np

from vit_jax import models
from vit_jax.errors import CheckpointError
from vit_jax.formats import params as params_lib
from vit_jax.formats import safetensors_file
from vit_jax.formats import torch_layout as torch
from vit_jax.formats import vit_model

NAME = "timm's VisionTransformer"
# timm's IMAGENET_DEFAULT_MEAN and _STD, for a pretrained_cfg without its own.
_IMAGENET_DEFAULT_PIXELS = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
_REFUSED = {
    'fc_norm.weight': 'a final norm after the pooling (fc_norm), which the '
                      'official ViT applies before it',
    'reg_token': 'register tokens', 'dist_token': "DeiT's distillation token",
    'attn_pool.latent': "an attention-pooling head (timm's 'map')",
    'norm_pre.weight': 'a norm before the blocks (CLIP-style pre_norm)',
}
_BACKBONE = 'patch_embed.backbone.'
_STAGE_UNIT = re.compile(r'patch_embed\.backbone\.stages\.(\d+)\.blocks\.'
                         r'(\d+)\.')
# A bottleneck unit's convolutions and GroupNorms, ours: timm's.
_UNIT_LAYERS = dict(conv1='conv1', conv2='conv2', conv3='conv3', gn1='norm1',
                    gn2='norm2', gn3='norm3', conv_proj='downsample.conv',
                    gn_proj='downsample.norm')
# timm's hybrid factory of each backbone it builds.
_HYBRID_FACTORIES = {
    (3, 4, 9): 'vit_base_r50_s16_224', (2, 2, 2, 2): 'vit_small_r26_s32_224',
    (3, 4, 6, 3): 'vit_large_r50_s32_224', (): 'vit_tiny_r_s16_p8_224',
}
_BLOCK = re.compile(r'blocks\.(\d+)\.')
_TOP = {
    'cls': 'cls_token', torch.POSITIONS: 'pos_embed',
    'embedding': 'patch_embed.proj', 'Transformer/encoder_norm': 'norm',
    'head': 'head'
}
# Query, key and value unfused, as timm's `attn.qkv` split (`_fused`).
_BLOCK_NAMES = {
    'LayerNorm_0': 'norm1', torch.ATTENTION + 'query': 'attn.q',
    torch.ATTENTION + 'key': 'attn.k', torch.ATTENTION + 'value': 'attn.v',
    torch.ATTENTION + 'out': 'attn.proj', 'LayerNorm_1': 'norm2',
    'MlpBlock_0/Dense_0': 'mlp.fc1', 'MlpBlock_0/Dense_1': 'mlp.fc2',
}

# Our fields as its config.json's model_args name them.
_STATED = dict(hidden_size='embed_dim', num_layers='depth',
               num_heads='num_heads')


def _names(params: dict) -> torch.Names:
  """timm's names of the modules of `params`, a ViT or hybrid's."""
  # A backbone of no stages is timm's stem alone.
  stem = _BACKBONE + ('stem.' if 'block1' in params else '')
  top = {**_TOP, 'conv_root': stem + 'conv', 'gn_root': stem + 'norm'}

  def name(module: str) -> str:
    if unit := params_lib.UNIT.fullmatch(module):
      return (f'{_BACKBONE}stages.{int(unit[1]) - 1}.blocks.{int(unit[2]) - 1}'
              f'.{_UNIT_LAYERS[unit[3]]}')
    return torch.module_name(module, top, _BLOCK_NAMES, 'blocks.{}.')

  return name


def is_state(keys) -> bool:
  """Whether arrays named `keys` look like a timm ViT's."""
  return 'patch_embed.proj.weight' in keys or ('pos_embed' in keys and any(
      _BLOCK.match(key) for key in keys))


def _xp(array):
  return np if isinstance(array, np.ndarray) else jnp


def _fused(state: dict) -> dict:
  """`attn.q`, `attn.k` and `attn.v` fused into timm's `attn.qkv`."""
  state = dict(state)
  for key in [key for key in state if '.attn.q.' in key]:
    parts = [state.pop(key.replace('.q.', f'.{part}.')) for part in 'qkv']
    state[key.replace('.q.', '.qkv.')] = _xp(parts[0]).concatenate(parts)
  return state


def _unfused(state: dict) -> dict:
  state = dict(state)
  for key in [key for key in state if '.attn.qkv.' in key]:
    for part, p in zip('qkv', _xp(state[key]).split(state.pop(key), 3)):
      state[key.replace('.qkv.', f'.{part}.')] = p
  return state


def to_state(params: dict) -> dict[str, Any]:
  """Our tree (either block layout) as timm's state dict."""
  return _fused(torch.to_state(params, _names(params)))


def _hybrid_fields(state: dict, source: str) -> dict:
  """The stages and width of a timm hybrid's ResNetV2 stem; none for a ViT."""
  if not any(key.startswith(_BACKBONE) for key in state):
    return {}
  root = next((_BACKBONE + key for key in ('stem.conv.weight', 'conv.weight')
               if _BACKBONE + key in state), None)
  if root is None:
    other = min(key for key in state if key.startswith(_BACKBONE))
    raise CheckpointError(
        f'{source} holds a timm hybrid whose backbone is not the official '
        f'ResNet stem ({other}): only ResNetV2 backbones read in.')
  return dict(
      resnet_stages=params_lib.stage_units(state, _STAGE_UNIT, 0),
      resnet_width_factor=params_lib.stem_width_factor(state[root].shape[0],
                                                       f'{root} in {source}'))


def config(model: models.VisionTransformer, image_size: int,
           pixels: tuple[tuple, tuple]) -> dict:
  """The hub folder's config.json for `model`, normalizing by `pixels`."""
  global_pool = 'token' if model.classifier == 'token' else 'avg'
  # norm_layer: timm's LayerNorm, of eps 1e-6.
  model_args = dict(
      img_size=image_size, patch_size=model.patch_size,
      embed_dim=model.hidden_size, depth=model.num_layers,
      num_heads=model.num_heads, mlp_ratio=model.mlp_dim / model.hidden_size,
      qkv_bias=True, class_token=model.classifier == 'token',
      global_pool=global_pool, fc_norm=False, act_layer='gelu_tanh',
      norm_layer='layernorm', num_classes=model.num_classes)
  hybrid = model.resnet_stages is not None
  stem = _BACKBONE + ('stem.conv' if model.resnet_stages else 'conv')
  mean, std = (list(map(float, p)) for p in pixels)
  return dict(
      architecture=(_HYBRID_FACTORIES[tuple(model.resnet_stages)]
                    if hybrid else 'vit_base_patch16_224'),
      num_classes=model.num_classes, num_features=model.hidden_size,
      global_pool=global_pool, model_args=model_args, pretrained_cfg=dict(
          input_size=[3, image_size, image_size], fixed_input_size=True,
          interpolation='bilinear', crop_pct=1.0, crop_mode='squash', mean=mean,
          std=std, num_classes=model.num_classes,
          first_conv=stem if hybrid else 'patch_embed.proj', classifier='head'))


FILES = (safetensors_file.WEIGHTS_NAME, 'config.json')


def write(
    directory: pathlib.Path, params: dict, model: models.VisionTransformer,
    image_size: int, pixels: tuple[tuple, tuple] = vit_model.RELEASED_PIXELS,
    class_names: tuple[str, ...] = ()
) -> None:
  """timm's hub folder in `directory`; `pixels`: the training (mean, std)."""
  stages, factor = model.resnet_stages, model.resnet_width_factor
  built = ', '.join(map(str, list(_HYBRID_FACTORIES)[:-1]))
  # timm's MLP width: int(hidden_size * mlp_ratio).
  rounded = int(model.hidden_size * (model.mlp_dim / model.hidden_size))
  other_stem = stages is not None and (tuple(stages) not in _HYBRID_FACTORIES or
                                       factor != 1)
  vit_model.check_exportable(
      model, NAME, {
          **vit_model.folder_lacks(model), f'MLP of width {model.mlp_dim} (timm builds int(width x mlp_ratio), '
          'which rounds it down)': rounded != model.mlp_dim,
          f'hybrid of ResNet stages {stages} and width factor {factor} (its '
          f'factories build stages {built} or none, of width factor 1)': other_stem,
      })
  hub_config = config(model, image_size, pixels)
  if class_names:  # as timm's push_to_hf_hub writes them
    hub_config['label_names'] = list(class_names)
  torch.write_folder(directory, to_state(params), {'config.json': hub_config})


def pixels(path: pathlib.Path) -> tuple[tuple, tuple]:
  """The (mean, std) of the hub folder's config.json, else [-1, 1]."""
  if (config_dict := vit_model.folder_config(path, 'config.json')) is None:
    return vit_model.RELEASED_PIXELS
  source = str(pathlib.Path(path) / 'config.json')
  pretrained = config_dict.get('pretrained_cfg', config_dict)
  if not isinstance(pretrained, dict):
    raise CheckpointError(f'{source}: its pretrained_cfg is not a JSON object.')
  return vit_model.checked_pixels(pretrained.get('mean'), pretrained.get('std'),
                                  source, _IMAGENET_DEFAULT_PIXELS)


def class_names(path: pathlib.Path) -> tuple[str, ...]:
  """The folder's `label_names`, each as its `label_descriptions` says it."""
  config_dict = vit_model.folder_config(path, 'config.json') or {}
  if not isinstance(names := config_dict.get('label_names'), list):
    return ()
  described = config_dict.get('label_descriptions')
  described = described if isinstance(described, dict) else {}
  return tuple(str(described.get(str(name), name)) for name in names)


def read(path: pathlib.Path, model_name: str | None) -> dict:
  """Our tree from a timm `.safetensors` file or hub folder."""
  config_dict, path, state = torch.read_weights(path)
  model_args = (config_dict or {}).get('model_args') or {}
  if config_dict is not None and model_args.get('act_layer') not in (
      'gelu_tanh', 'gelu_pytorch_tanh'):
    logging.warning(
        '%s was trained with exact GELU (timm\'s default), which vit_jax '
        'computes with the tanh approximation of the official model: its '
        'logits move slightly (docs/checkpoints.md).', path)
  pool = (config_dict or {}).get('global_pool', 'token')
  if 'cls_token' in state and pool != 'token':
    raise CheckpointError(f'{path} pools its tokens (global_pool={pool!r}) '
                          'beside a class token, which the official ViT reads '
                          'alone.')
  for key, what in _REFUSED.items():
    if key in state:
      raise CheckpointError(f'{path} holds a timm ViT with {what} ({key}), '
                            'which the official ViT does not have.')
  shapes = torch.expected_shapes(
      state, _names({}), _BLOCK, to_state, library='timm',
      layout="timm's layout", model_name=model_name, stated=_STATED,
      config=model_args, source=str(path),
      classifier='token' if 'cls_token' in state else 'gap',
      **_hybrid_fields(state, str(path)))
  return torch.from_state(_unfused(state), shapes, _names(shapes))

"""timm's `VisionTransformer`: `model.safetensors` and the hub folder's
`config.json`, which `timm.create_model('local-dir:DIR', pretrained=True)`
reads; its model_args make timm compute our logits (tanh GELU, no fc_norm).
The hybrid is timm's `HybridEmbed` on a `ResNetV2` backbone.
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
# A bottleneck unit's convolutions and GroupNorms, ours and timm's.
_UNIT_LAYERS = [
    *((f'conv{r}', f'gn{r}', f'conv{r}', f'norm{r}') for r in (1, 2, 3)),
    ('conv_proj', 'gn_proj', 'downsample.conv', 'downsample.norm'),
]
# timm's hybrid factory of each backbone it builds.
_HYBRID_FACTORIES = {
    (3, 4, 9): 'vit_base_r50_s16_224', (2, 2, 2, 2): 'vit_small_r26_s32_224',
    (3, 4, 6, 3): 'vit_large_r50_s32_224', (): 'vit_tiny_r_s16_p8_224',
}
_BLOCK = re.compile(r'blocks\.(\d+)\.')
_HEAD = ('head.weight', 'head.bias')
_ATTENTION = 'MultiHeadDotProductAttention_0/'

_TOP = [
    torch.Rule('cls', 'cls_token'),
    torch.Rule('Transformer/posembed_input/pos_embedding', 'pos_embed'),
    torch.Rule('embedding/kernel', 'patch_embed.proj.weight', 'conv2d'),
    torch.Rule('embedding/bias', 'patch_embed.proj.bias'),
    torch.Rule('Transformer/encoder_norm/scale', 'norm.weight'),
    torch.Rule('Transformer/encoder_norm/bias', 'norm.bias'),
    torch.Rule('head/kernel', 'head.weight', 'linear'),
    torch.Rule('head/bias', 'head.bias'),
]
# Query, key and value unfused, as timm's `attn.qkv` split (`_fused`).
_BLOCK_RULES = [
    torch.Rule('LayerNorm_0/scale', 'blocks.{i}.norm1.weight'),
    torch.Rule('LayerNorm_0/bias', 'blocks.{i}.norm1.bias'),
    *(torch.Rule(f'{_ATTENTION}{name}/{array}', f'blocks.{{i}}.attn.{name[0]}.'
                 f'{torch_name}', layout) for name in ('query', 'key', 'value')
      for array, torch_name, layout in (('kernel', 'weight', 'heads_in'),
                                        ('bias', 'bias', 'heads_bias'))),
    torch.Rule(_ATTENTION + 'out/kernel', 'blocks.{i}.attn.proj.weight',
               'heads_out'),
    torch.Rule(_ATTENTION + 'out/bias', 'blocks.{i}.attn.proj.bias'),
    torch.Rule('LayerNorm_1/scale', 'blocks.{i}.norm2.weight'),
    torch.Rule('LayerNorm_1/bias', 'blocks.{i}.norm2.bias'),
    torch.Rule('MlpBlock_0/Dense_0/kernel', 'blocks.{i}.mlp.fc1.weight',
               'linear'),
    torch.Rule('MlpBlock_0/Dense_0/bias', 'blocks.{i}.mlp.fc1.bias'),
    torch.Rule('MlpBlock_0/Dense_1/kernel', 'blocks.{i}.mlp.fc2.weight',
               'linear'),
    torch.Rule('MlpBlock_0/Dense_1/bias', 'blocks.{i}.mlp.fc2.bias'),
]


def _stem_rules(stages: tuple[int, ...] | None) -> list[torch.Rule]:
  """The hybrid stem's rules."""
  if stages is None:
    return []
  root = _BACKBONE + ('stem.' if stages else '')
  rules = [
      torch.Rule('conv_root/kernel', root + 'conv.weight', 'conv2d'),
      torch.Rule('gn_root/scale', root + 'norm.weight'),
      torch.Rule('gn_root/bias', root + 'norm.bias')
  ]
  for stage, units in enumerate(stages):
    for unit in range(units):
      ours = f'block{stage + 1}/unit{unit + 1}/'
      theirs = f'{_BACKBONE}stages.{stage}.blocks.{unit}.'
      for conv, group_norm, torch_conv, torch_norm in _UNIT_LAYERS:
        rules += [
            torch.Rule(f'{ours}{conv}/kernel', f'{theirs}{torch_conv}.weight',
                       'conv2d'),
            torch.Rule(f'{ours}{group_norm}/scale',
                       f'{theirs}{torch_norm}.weight'),
            torch.Rule(f'{ours}{group_norm}/bias', f'{theirs}{torch_norm}.bias')
        ]
  return rules


def _state_stages(state: dict, source: str) -> tuple[int, ...] | None:
  """The stages of a timm hybrid's ResNetV2 stem, None for a pure ViT."""
  if not any(key.startswith(_BACKBONE) for key in state):
    return None
  if (_BACKBONE + 'stem.conv.weight' not in state and
      _BACKBONE + 'conv.weight' not in state):
    other = min(key for key in state if key.startswith(_BACKBONE))
    raise CheckpointError(
        f'{source} holds a timm hybrid whose backbone is not the official '
        f'ResNet stem ({other}): only ResNetV2 backbones read in.')
  units = {}
  for key in state:
    match = _STAGE_UNIT.match(key)
    if match:
      stage, unit = int(match.group(1)), int(match.group(2))
      units[stage] = max(units.get(stage, 0), unit + 1)
  return tuple(units[stage] for stage in sorted(units))


def is_state(keys) -> bool:
  """Whether arrays named `keys` look like a timm ViT's."""
  return 'patch_embed.proj.weight' in keys or ('pos_embed' in keys and any(
      _BLOCK.match(key) for key in keys))


def _fused(state: dict) -> dict:
  """`attn.q`, `attn.k` and `attn.v` fused into timm's `attn.qkv`."""
  state = dict(state)
  i = 0
  while f'blocks.{i}.attn.q.weight' in state:
    for array in ('weight', 'bias'):
      state[f'blocks.{i}.attn.qkv.{array}'] = torch.concatenate([
          state.pop(f'blocks.{i}.attn.{part}.{array}') for part in 'qkv'
      ])
    i += 1
  return state


def _unfused(state: dict) -> dict:
  state = dict(state)
  i = 0
  while f'blocks.{i}.attn.qkv.weight' in state:
    for array in ('weight', 'bias'):
      parts = torch.split(state.pop(f'blocks.{i}.attn.qkv.{array}'), 3)
      state.update({
          f'blocks.{i}.attn.{part}.{array}': value
          for part, value in zip('qkv', parts)
      })
    i += 1
  return state


def to_state(params: dict) -> dict[str, Any]:
  """Our tree (either block layout) as timm's state dict."""
  stages = params_lib.vit_architecture(params)['resnet_stages']
  return _fused(torch.to_state(params, _TOP + _stem_rules(stages),
                               _BLOCK_RULES))


def _expected_model(state: dict, num_heads: int,
                    source: str) -> tuple[models.VisionTransformer, int]:
  """The ViT `state` should be, from a few of its arrays' shapes."""
  for key, what in _REFUSED.items():
    if key in state:
      raise CheckpointError(f'{source} holds a timm ViT with {what} ({key}), '
                            'which the official ViT does not have.')
  for key in ('pos_embed', 'patch_embed.proj.weight', 'norm.weight',
              'blocks.0.mlp.fc1.weight'):
    if key not in state:
      raise CheckpointError(f'{source} is not a timm ViT: it has no {key}.')
  model = models.VisionTransformer(
      num_classes=state['head.weight'].shape[0] if 'head.weight' in state else
      1, patch_size=state['patch_embed.proj.weight'].shape[-1],
      hidden_size=state['pos_embed'].shape[-1], num_layers=1 + max(
          int(_BLOCK.match(key).group(1))
          for key in state if _BLOCK.match(key)), num_heads=num_heads,
      mlp_dim=state['blocks.0.mlp.fc1.weight'].shape[0],
      classifier='token' if 'cls_token' in state else 'gap',
      **_hybrid_fields(state, source))
  side = vit_model.grid_side(state['pos_embed'].shape[1],
                             len(model.prefix_tokens), source, 'pos_embed')
  return model, side * model.effective_patch_size


def _hybrid_fields(state: dict, source: str) -> dict:
  stages = _state_stages(state, source)
  if stages is None:
    return {}
  root = next(_BACKBONE + key for key in ('stem.conv.weight', 'conv.weight')
              if _BACKBONE + key in state)
  return {
      'resnet_stages': stages,
      'resnet_width_factor': params_lib.stem_width_factor(
          state[root].shape[0], f'{root} in {source}')
  }


def from_state(state: dict, num_heads: int, source: str) -> dict:
  """timm's state dict as our tree; CheckpointError naming the key of any
  array missing, unexpected or of the wrong shape."""
  model, image_size = _expected_model(state, num_heads, source)
  shapes = params_lib.param_shapes(model, image_size)
  described = params_lib.describe_architecture(
      params_lib.vit_architecture(shapes))
  torch.check_state(state, jax.eval_shape(to_state, shapes), optional=_HEAD,
                    source=source, target=f"timm's layout of {described}")
  return torch.from_state(_unfused(state),
                          _TOP + _stem_rules(model.resnet_stages), _BLOCK_RULES,
                          model.num_layers, num_heads)


def config(model: models.VisionTransformer, image_size: int,
           pixels: tuple[tuple, tuple]) -> dict:
  """The hub folder's config.json for `model`, normalizing by `pixels`."""
  global_pool = 'token' if model.classifier == 'token' else 'avg'
  model_args = {
      'img_size': image_size,
      'patch_size': model.patch_size,
      'embed_dim': model.hidden_size,
      'depth': model.num_layers,
      'num_heads': model.num_heads,
      'mlp_ratio': model.mlp_dim / model.hidden_size,
      'qkv_bias': True,
      'class_token': model.classifier == 'token',
      'global_pool': global_pool,
      'fc_norm': False,
      'act_layer': 'gelu_tanh',
      'norm_layer': 'layernorm',  # timm's LayerNorm: eps 1e-6
      'num_classes': model.num_classes,
  }
  hybrid = model.resnet_stages is not None
  return {
      'architecture': (_HYBRID_FACTORIES[tuple(model.resnet_stages)]
                       if hybrid else 'vit_base_patch16_224'),
      'num_classes': model.num_classes, 'num_features': model.hidden_size,
      'global_pool': global_pool, 'model_args': model_args, 'pretrained_cfg': {
          'input_size': [3, image_size, image_size], 'fixed_input_size': True,
          'interpolation': 'bilinear', 'crop_pct': 1.0, 'crop_mode': 'center',
          'mean': [float(x)
                   for x in pixels[0]], 'std': [float(x) for x in pixels[1]],
          'num_classes': model.num_classes, 'first_conv': (
              (_BACKBONE + ('stem.conv' if model.resnet_stages else 'conv'))
              if hybrid else 'patch_embed.proj'), 'classifier': 'head',
      },
  }


def check_exportable(model: models.VisionTransformer) -> None:
  vit_model.check_exportable(
      model, NAME, {
          **vit_model.common_unsupported(model), 'pre-logits layer (representation_size)':
              model.representation_size is not None,
          f'hybrid of ResNet stages {model.resnet_stages} and width factor '
          f'{model.resnet_width_factor} (its factories build stages '
          f'{", ".join(map(str, list(_HYBRID_FACTORIES)[:-1]))} or none, of '
          'width factor 1)':
              model.resnet_stages is not None and
              (tuple(model.resnet_stages) not in _HYBRID_FACTORIES or
               model.resnet_width_factor != 1),
      })


FILES = (safetensors_file.WEIGHTS_NAME, 'config.json')


def write(directory: pathlib.Path, params: dict,
          model: models.VisionTransformer, image_size: int,
          pixels: tuple[tuple, tuple] = vit_model.RELEASED_PIXELS) -> None:
  """timm's hub folder in `directory`; `pixels`: the training (mean, std)."""
  check_exportable(model)
  directory = pathlib.Path(directory)
  safetensors_file.write(directory / safetensors_file.WEIGHTS_NAME,
                         to_state(jax.device_get(params)))
  files.write_atomically(
      directory / 'config.json',
      json.dumps(config(model, image_size, pixels), indent=2))


def pixels(path: pathlib.Path) -> tuple[tuple, tuple]:
  """The (mean, std) a hub folder's config.json states; without one, the
  released models' [-1, 1]."""
  config_dict = vit_model.folder_config(path, 'config.json')
  if config_dict is None:
    return vit_model.RELEASED_PIXELS
  source = str(pathlib.Path(path) / 'config.json')
  pretrained = config_dict.get('pretrained_cfg', config_dict)
  if not isinstance(pretrained, dict):
    raise CheckpointError(f'{source}: its pretrained_cfg is not a JSON '
                          'object.')
  return vit_model.checked_pixels(pretrained.get('mean'), pretrained.get('std'),
                                  source, _IMAGENET_DEFAULT_PIXELS)


def read(path: pathlib.Path, model_name: str | None) -> dict:
  """Our tree from a timm `.safetensors` file or hub folder."""
  path = pathlib.Path(path)
  config_dict = vit_model.folder_config(path, 'config.json')
  model_args = None if config_dict is None else (
      config_dict.get('model_args') or {})
  if path.is_dir():
    path = path / safetensors_file.WEIGHTS_NAME
  state = safetensors_file.read(path)
  if model_args is not None and model_args.get('act_layer') not in (
      'gelu_tanh', 'gelu_pytorch_tanh'):
    logging.warning(
        '%s was trained with exact GELU (timm\'s default), which vit_jax '
        'computes with the tanh approximation of the official model: its '
        'logits move slightly (docs/checkpoints.md).', path)
  if 'pos_embed' not in state:
    raise CheckpointError(f'{path} is not a timm ViT: it has no pos_embed.')
  heads = vit_model.num_heads(state['pos_embed'].shape[-1],
                              model_name=model_name,
                              stated=(model_args or
                                      {}).get('num_heads'), source=str(path))
  return from_state(state, heads, str(path))

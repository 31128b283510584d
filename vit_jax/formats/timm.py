"""timm's `VisionTransformer` layout: `model.safetensors` (timm's names and
PyTorch's array layouts, query, key and value fused into one `qkv`), and
the hub folder's `config.json`, which `timm.create_model('local-dir:DIR',
pretrained=True)` reads.

What we write is timm's model of our logits: tanh GELU
(`act_layer='gelu_tanh'`; timm's default is the exact one), LayerNorm eps
1e-6 (timm's default), a class token with `global_pool='token'`, or
`global_pool='avg'` with `fc_norm=False` for our 'gap' head (the final norm
before the mean, as the official model; timm's default moves it after).
timm's ViT has no pre-logits layer, MAP head of ours or hybrid of ours: such
models are refused in one line.
"""

import json
import pathlib
import re
from typing import Any

from absl import logging
import jax

from vit_jax import files
from vit_jax import models
from vit_jax.errors import CheckpointError
from vit_jax.formats import params as params_lib
from vit_jax.formats import safetensors_file
from vit_jax.formats import torch_layout as torch
from vit_jax.formats import vit_model
from vit_jax.models import remat_scan

NAME = "timm's VisionTransformer"
# Keys of timm models we cannot hold, and what they are.
_REFUSED = {
    'fc_norm.weight': 'a final norm after the pooling (fc_norm), which the '
                      'official ViT applies before it',
    'reg_token': 'register tokens',
    'dist_token': "DeiT's distillation token",
    'attn_pool.latent': "an attention-pooling head (timm's 'map')",
    'norm_pre.weight': 'a norm before the blocks (CLIP-style pre_norm)',
    'patch_embed.backbone.stem.conv.weight': 'a ResNet stem (the hybrid)',
}
_BLOCK = re.compile(r'blocks\.(\d+)\.')
_QKV = ('query', 'key', 'value')


def is_state(keys) -> bool:
  """Whether arrays named `keys` look like a timm ViT's."""
  return 'patch_embed.proj.weight' in keys or (
      'pos_embed' in keys and any(_BLOCK.match(key) for key in keys))


def to_state(params: dict) -> dict[str, Any]:
  """Our tree (the official layout) as timm's state dict."""
  params = params_lib.unstack_blocks(params)
  encoder = params['Transformer']
  state = {}
  if 'cls' in params:
    state['cls_token'] = params['cls']
  state['pos_embed'] = encoder['posembed_input']['pos_embedding']
  state['patch_embed.proj.weight'] = torch.conv2d(params['embedding']['kernel'])
  state['patch_embed.proj.bias'] = params['embedding']['bias']
  i = 0
  while remat_scan.block_name(i) in encoder:
    block, prefix = encoder[remat_scan.block_name(i)], f'blocks.{i}.'
    attention = block['MultiHeadDotProductAttention_0']
    state.update({
        prefix + 'norm1.weight': block['LayerNorm_0']['scale'],
        prefix + 'norm1.bias': block['LayerNorm_0']['bias'],
        prefix + 'attn.qkv.weight': torch.concatenate(
            [torch.heads_linear(attention[n]['kernel']) for n in _QKV]),
        prefix + 'attn.qkv.bias': torch.concatenate(
            [torch.flat(attention[n]['bias']) for n in _QKV]),
        prefix + 'attn.proj.weight': torch.out_linear(
            attention['out']['kernel']),
        prefix + 'attn.proj.bias': attention['out']['bias'],
        prefix + 'norm2.weight': block['LayerNorm_1']['scale'],
        prefix + 'norm2.bias': block['LayerNorm_1']['bias'],
    })
    for dense, linear in (('Dense_0', 'fc1'), ('Dense_1', 'fc2')):
      layer = block['MlpBlock_0'][dense]
      state[f'{prefix}mlp.{linear}.weight'] = torch.linear(layer['kernel'])
      state[f'{prefix}mlp.{linear}.bias'] = layer['bias']
    i += 1
  state['norm.weight'] = encoder['encoder_norm']['scale']
  state['norm.bias'] = encoder['encoder_norm']['bias']
  if 'head' in params:
    state['head.weight'] = torch.linear(params['head']['kernel'])
    state['head.bias'] = params['head']['bias']
  return state


def _expected_model(state: dict, num_heads: int,
                    source: str) -> tuple[models.VisionTransformer, int]:
  """The ViT whose timm state dict `state` should be, from the shapes of a
  few of its arrays; one line for what we cannot hold."""
  for key, what in _REFUSED.items():
    if key in state:
      raise CheckpointError(f'{source} holds a timm ViT with {what} ({key}), '
                            'which the official ViT does not have.')
  for key in ('pos_embed', 'patch_embed.proj.weight', 'norm.weight',
              'blocks.0.mlp.fc1.weight'):
    if key not in state:
      raise CheckpointError(f'{source} is not a timm ViT: it has no {key}.')
  if 'head.weight' not in state:
    raise CheckpointError(f'{source} has no classification head '
                          '(head.weight): a timm backbone alone cannot be '
                          'converted or evaluated; fine-tune it with '
                          'config.init_from.')
  hidden = state['pos_embed'].shape[-1]
  model = models.VisionTransformer(
      num_classes=state['head.weight'].shape[0],
      patch_size=state['patch_embed.proj.weight'].shape[-1],
      hidden_size=hidden,
      num_layers=1 + max(int(_BLOCK.match(key).group(1)) for key in state
                         if _BLOCK.match(key)),
      num_heads=num_heads,
      mlp_dim=state['blocks.0.mlp.fc1.weight'].shape[0],
      classifier='token' if 'cls_token' in state else 'gap')
  patches = state['pos_embed'].shape[1] - len(model.prefix_tokens)
  side = int(round(patches**0.5))
  if side * side != patches:
    raise CheckpointError(
        f'{source} has pos_embed for {patches} patches and '
        f'{len(model.prefix_tokens)} class token(s): not a square grid (a '
        "timm model with no_embed_class=True, which we cannot hold?).")
  return model, side * model.patch_size


def from_state(state: dict, num_heads: int, source: str) -> dict:
  """timm's state dict as our tree; CheckpointError naming the timm key of
  any array missing, unexpected or of the wrong shape."""
  model, image_size = _expected_model(state, num_heads, source)
  shapes = params_lib.param_shapes(model, image_size)
  described = params_lib.describe_architecture(
      params_lib.vit_architecture(shapes))
  params_lib.check_params(state, jax.eval_shape(to_state, shapes),
                          source=source,
                          target=f"timm's layout of {described}")
  params = {}
  if 'cls_token' in state:
    params['cls'] = state['cls_token']
  encoder = {'posembed_input': {'pos_embedding': state['pos_embed']},
             'encoder_norm': {'scale': state['norm.weight'],
                              'bias': state['norm.bias']}}
  for i in range(model.num_layers):
    prefix = f'blocks.{i}.'
    qkv = torch.split(state[prefix + 'attn.qkv.weight'], 3)
    qkv_bias = torch.split(state[prefix + 'attn.qkv.bias'], 3)
    attention = {
        name: {'kernel': torch.heads_dense(weight, num_heads),
               'bias': torch.per_head(bias, num_heads)}
        for name, weight, bias in zip(_QKV, qkv, qkv_bias)}
    attention['out'] = {
        'kernel': torch.out_dense(state[prefix + 'attn.proj.weight'],
                                  num_heads),
        'bias': state[prefix + 'attn.proj.bias']}
    encoder[remat_scan.block_name(i)] = {
        'LayerNorm_0': {'scale': state[prefix + 'norm1.weight'],
                        'bias': state[prefix + 'norm1.bias']},
        'MultiHeadDotProductAttention_0': attention,
        'LayerNorm_1': {'scale': state[prefix + 'norm2.weight'],
                        'bias': state[prefix + 'norm2.bias']},
        'MlpBlock_0': {
            dense: {'kernel': torch.dense(state[f'{prefix}mlp.{linear}.weight']),
                    'bias': state[f'{prefix}mlp.{linear}.bias']}
            for dense, linear in (('Dense_0', 'fc1'), ('Dense_1', 'fc2'))},
    }
  params['Transformer'] = encoder
  params['embedding'] = {
      'kernel': torch.conv(state['patch_embed.proj.weight']),
      'bias': state['patch_embed.proj.bias']}
  params['head'] = {'kernel': torch.dense(state['head.weight']),
                    'bias': state['head.bias']}
  return params


def config(model: models.VisionTransformer, image_size: int) -> dict:
  """The hub folder's config.json for `model`: timm's factory
  `vit_base_patch16_224` with `model_args` that set every field."""
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
  return {
      'architecture': 'vit_base_patch16_224',
      'num_classes': model.num_classes,
      'num_features': model.hidden_size,
      'global_pool': global_pool,
      'model_args': model_args,
      'pretrained_cfg': {
          'input_size': [3, image_size, image_size],
          'fixed_input_size': True,
          'interpolation': 'bilinear',
          'crop_pct': 1.0,
          'crop_mode': 'center',
          'mean': [0.5, 0.5, 0.5],
          'std': [0.5, 0.5, 0.5],
          'num_classes': model.num_classes,
          'first_conv': 'patch_embed.proj',
          'classifier': 'head',
      },
  }


def check_exportable(model: models.VisionTransformer) -> None:
  vit_model.check_exportable(model, NAME, {
      **vit_model.common_unsupported(model),
      'pre-logits layer (representation_size)':
          model.representation_size is not None,
  })


def write(directory: pathlib.Path, params: dict,
          model: models.VisionTransformer, image_size: int) -> None:
  """`directory`/model.safetensors and config.json, timm's hub folder."""
  check_exportable(model)
  directory = pathlib.Path(directory)
  safetensors_file.write(directory / safetensors_file.WEIGHTS_NAME,
                         to_state(jax.device_get(params)))
  files.write_atomically(directory / 'config.json',
                         json.dumps(config(model, image_size), indent=2))


def read(path: pathlib.Path, model_name: str | None) -> dict:
  """Our tree from a timm `.safetensors` file or hub folder (whose
  config.json, when there, gives the number of heads)."""
  path = pathlib.Path(path)
  model_args = None
  if path.is_dir():
    config_file = path / 'config.json'
    if config_file.exists():
      try:
        model_args = json.loads(config_file.read_text()).get('model_args') or {}
      except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as e:
        raise CheckpointError(f'{config_file} is not a timm config: {e}.'
                              ) from e
    path = path / safetensors_file.WEIGHTS_NAME
  has_config = model_args is not None
  model_args = model_args or {}
  state = safetensors_file.read(path)
  if has_config and model_args.get('act_layer') not in ('gelu_tanh',
                                                        'gelu_pytorch_tanh'):
    logging.warning(
        '%s was trained with exact GELU (timm\'s default), which vit_jax '
        'computes with the tanh approximation of the official model: its '
        'logits move slightly (README, "Checkpoints from anywhere").', path)
  if 'pos_embed' not in state:
    raise CheckpointError(f'{path} is not a timm ViT: it has no pos_embed.')
  heads = vit_model.num_heads(state['pos_embed'].shape[-1],
                              model_name=model_name,
                              stated=model_args.get('num_heads'),
                              source=str(path))
  return from_state(state, heads, str(path))

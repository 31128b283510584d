"""Hugging Face transformers' ViT layout: a folder with `config.json`
(`ViTConfig`), `model.safetensors` (`ViTForImageClassification`'s names,
PyTorch's array layouts) and `preprocessor_config.json`
(`ViTImageProcessor`), which `from_pretrained(DIR)` reads.

What we write is transformers' model of our logits: tanh GELU
(`hidden_act='gelu_pytorch_tanh'`; transformers' default is the exact one)
and LayerNorm eps 1e-6 (its default is 1e-12). transformers' ViT reads the
class token only: our 'gap' head, pre-logits layer, MAP head and hybrid are
refused in one line.
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

NAME = "transformers' ViTForImageClassification"
PREPROCESSOR_CONFIG = 'preprocessor_config.json'
_LAYER = re.compile(r'(?:vit\.)?encoder\.layer\.(\d+)\.')
_QKV = ('query', 'key', 'value')
# ViTForImageClassification's names; a bare ViTModel's lack the prefix.
_PREFIX = 'vit.'


def is_state(keys) -> bool:
  """Whether arrays named `keys` look like a transformers ViT's."""
  return any(key.startswith(('vit.embeddings.', 'embeddings.patch_'))
             for key in keys)


def to_state(params: dict) -> dict[str, Any]:
  """Our tree (the official layout) as ViTForImageClassification's state
  dict."""
  params = params_lib.unstack_blocks(params)
  encoder = params['Transformer']
  p = _PREFIX
  state = {
      p + 'embeddings.cls_token': params['cls'],
      p + 'embeddings.position_embeddings':
          encoder['posembed_input']['pos_embedding'],
      p + 'embeddings.patch_embeddings.projection.weight':
          torch.conv2d(params['embedding']['kernel']),
      p + 'embeddings.patch_embeddings.projection.bias':
          params['embedding']['bias'],
  }
  i = 0
  while remat_scan.block_name(i) in encoder:
    block, prefix = encoder[remat_scan.block_name(i)], f'{p}encoder.layer.{i}.'
    attention = block['MultiHeadDotProductAttention_0']
    for name in _QKV:
      state[f'{prefix}attention.attention.{name}.weight'] = (
          torch.heads_linear(attention[name]['kernel']))
      state[f'{prefix}attention.attention.{name}.bias'] = torch.flat(
          attention[name]['bias'])
    mlp = block['MlpBlock_0']
    state.update({
        prefix + 'attention.output.dense.weight': torch.out_linear(
            attention['out']['kernel']),
        prefix + 'attention.output.dense.bias': attention['out']['bias'],
        prefix + 'intermediate.dense.weight': torch.linear(
            mlp['Dense_0']['kernel']),
        prefix + 'intermediate.dense.bias': mlp['Dense_0']['bias'],
        prefix + 'output.dense.weight': torch.linear(mlp['Dense_1']['kernel']),
        prefix + 'output.dense.bias': mlp['Dense_1']['bias'],
        prefix + 'layernorm_before.weight': block['LayerNorm_0']['scale'],
        prefix + 'layernorm_before.bias': block['LayerNorm_0']['bias'],
        prefix + 'layernorm_after.weight': block['LayerNorm_1']['scale'],
        prefix + 'layernorm_after.bias': block['LayerNorm_1']['bias'],
    })
    i += 1
  state[p + 'layernorm.weight'] = encoder['encoder_norm']['scale']
  state[p + 'layernorm.bias'] = encoder['encoder_norm']['bias']
  if 'head' in params:
    state['classifier.weight'] = torch.linear(params['head']['kernel'])
    state['classifier.bias'] = params['head']['bias']
  return state


def _with_prefix(state: dict) -> dict:
  """A bare ViTModel's names as ViTForImageClassification's."""
  return {key if key.startswith(_PREFIX) or key.startswith('classifier.')
          else _PREFIX + key: value for key, value in state.items()}


def _expected_model(state: dict, num_heads: int,
                    source: str) -> tuple[models.VisionTransformer, int]:
  p = _PREFIX
  if p + 'pooler.dense.weight' in state:
    raise CheckpointError(
        f'{source} is a transformers ViTModel with a pooler (pooler.dense), '
        'which ViTForImageClassification, and so this converter, does not '
        'use: load it with config.init_from, which keeps the encoder.')
  for key in ('embeddings.position_embeddings',
              'embeddings.patch_embeddings.projection.weight',
              'embeddings.cls_token', 'encoder.layer.0.intermediate.dense.weight',
              'layernorm.weight'):
    if p + key not in state:
      raise CheckpointError(f'{source} is not a transformers ViT: it has no '
                            f'{key}.')
  if 'classifier.weight' not in state:
    raise CheckpointError(f'{source} has no classification head '
                          '(classifier.weight): a ViTModel alone cannot be '
                          'converted or evaluated; fine-tune it with '
                          'config.init_from.')
  positions = state[p + 'embeddings.position_embeddings']
  patch = state[p + 'embeddings.patch_embeddings.projection.weight'].shape[-1]
  model = models.VisionTransformer(
      num_classes=state['classifier.weight'].shape[0],
      patch_size=patch,
      hidden_size=positions.shape[-1],
      num_layers=1 + max(int(_LAYER.match(key).group(1)) for key in state
                         if _LAYER.match(key)),
      num_heads=num_heads,
      mlp_dim=state[p + 'encoder.layer.0.intermediate.dense.weight'].shape[0])
  patches = positions.shape[1] - 1
  side = int(round(patches**0.5))
  if side * side != patches:
    raise CheckpointError(f'{source} has position_embeddings for {patches} '
                          'patches: not a square grid.')
  return model, side * patch


def from_state(state: dict, num_heads: int, source: str) -> dict:
  """A transformers ViT's state dict (ViTForImageClassification's names, or
  a ViTModel's) as our tree; CheckpointError naming the transformers key of
  any array missing, unexpected or of the wrong shape."""
  state = _with_prefix(state)
  model, image_size = _expected_model(state, num_heads, source)
  shapes = params_lib.param_shapes(model, image_size)
  described = params_lib.describe_architecture(
      params_lib.vit_architecture(shapes))
  params_lib.check_params(state, jax.eval_shape(to_state, shapes),
                          source=source,
                          target=f"transformers' layout of {described}")
  p = _PREFIX
  encoder = {
      'posembed_input': {
          'pos_embedding': state[p + 'embeddings.position_embeddings']},
      'encoder_norm': {'scale': state[p + 'layernorm.weight'],
                       'bias': state[p + 'layernorm.bias']},
  }
  for i in range(model.num_layers):
    prefix = f'{p}encoder.layer.{i}.'
    attention = {
        name: {'kernel': torch.heads_dense(
                   state[f'{prefix}attention.attention.{name}.weight'],
                   num_heads),
               'bias': torch.per_head(
                   state[f'{prefix}attention.attention.{name}.bias'],
                   num_heads)}
        for name in _QKV}
    attention['out'] = {
        'kernel': torch.out_dense(
            state[prefix + 'attention.output.dense.weight'], num_heads),
        'bias': state[prefix + 'attention.output.dense.bias']}
    encoder[remat_scan.block_name(i)] = {
        'LayerNorm_0': {'scale': state[prefix + 'layernorm_before.weight'],
                        'bias': state[prefix + 'layernorm_before.bias']},
        'MultiHeadDotProductAttention_0': attention,
        'LayerNorm_1': {'scale': state[prefix + 'layernorm_after.weight'],
                        'bias': state[prefix + 'layernorm_after.bias']},
        'MlpBlock_0': {
            'Dense_0': {
                'kernel': torch.dense(
                    state[prefix + 'intermediate.dense.weight']),
                'bias': state[prefix + 'intermediate.dense.bias']},
            'Dense_1': {
                'kernel': torch.dense(state[prefix + 'output.dense.weight']),
                'bias': state[prefix + 'output.dense.bias']},
        },
    }
  return {
      'cls': state[p + 'embeddings.cls_token'],
      'Transformer': encoder,
      'embedding': {
          'kernel': torch.conv(
              state[p + 'embeddings.patch_embeddings.projection.weight']),
          'bias': state[p + 'embeddings.patch_embeddings.projection.bias']},
      'head': {'kernel': torch.dense(state['classifier.weight']),
               'bias': state['classifier.bias']},
  }


def config(model: models.VisionTransformer, image_size: int) -> dict:
  """`ViTConfig` for `model`, as config.json."""
  labels = {str(i): f'LABEL_{i}' for i in range(model.num_classes)}
  return {
      'architectures': ['ViTForImageClassification'],
      'model_type': 'vit',
      'hidden_size': model.hidden_size,
      'num_hidden_layers': model.num_layers,
      'num_attention_heads': model.num_heads,
      'intermediate_size': model.mlp_dim,
      'hidden_act': 'gelu_pytorch_tanh',
      'layer_norm_eps': 1e-6,
      'hidden_dropout_prob': 0.0,
      'attention_probs_dropout_prob': 0.0,
      'initializer_range': 0.02,
      'image_size': image_size,
      'patch_size': model.patch_size,
      'num_channels': 3,
      'qkv_bias': True,
      'encoder_stride': model.patch_size,
      'id2label': labels,
      'label2id': {label: int(i) for i, label in labels.items()},
      'torch_dtype': 'float32',
  }


def preprocessor_config(image_size: int) -> dict:
  """`ViTImageProcessor`'s config: the released models' preprocessing,
  resized to the model's input, pixels in [-1, 1]."""
  return {
      'image_processor_type': 'ViTImageProcessor',
      'do_resize': True,
      'size': {'height': image_size, 'width': image_size},
      'resample': 2,  # bilinear
      'do_rescale': True,
      'rescale_factor': 1 / 255,
      'do_normalize': True,
      'image_mean': [0.5, 0.5, 0.5],
      'image_std': [0.5, 0.5, 0.5],
  }


def check_exportable(model: models.VisionTransformer) -> None:
  vit_model.check_exportable(model, NAME, {
      **vit_model.common_unsupported(model),
      "'gap' head (it reads the class token)": model.classifier == 'gap',
      'pre-logits layer (representation_size)':
          model.representation_size is not None,
  })


def write(directory: pathlib.Path, params: dict,
          model: models.VisionTransformer, image_size: int) -> None:
  """`directory`/config.json, model.safetensors and
  preprocessor_config.json, transformers' folder."""
  check_exportable(model)
  directory = pathlib.Path(directory)
  safetensors_file.write(directory / safetensors_file.WEIGHTS_NAME,
                         to_state(jax.device_get(params)),
                         metadata={'format': 'pt'})
  files.write_atomically(directory / 'config.json',
                         json.dumps(config(model, image_size), indent=2))
  files.write_atomically(directory / PREPROCESSOR_CONFIG,
                         json.dumps(preprocessor_config(image_size), indent=2))


def read(path: pathlib.Path, model_name: str | None) -> dict:
  """Our tree from a transformers ViT folder (or its model.safetensors
  alone, the heads then from `--model` or the registered ViTs)."""
  path = pathlib.Path(path)
  config_dict = {}
  if path.is_dir():
    config_file = path / 'config.json'
    if config_file.exists():
      try:
        config_dict = json.loads(config_file.read_text())
      except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f'{config_file} is not valid JSON: {e}.') from e
    path = path / safetensors_file.WEIGHTS_NAME
  state = _with_prefix(safetensors_file.read(path))
  act = config_dict.get('hidden_act', 'gelu')  # transformers' default
  if config_dict and act not in ('gelu_pytorch_tanh', 'gelu_new',
                                 'gelu_fast'):
    logging.warning(
        "%s uses hidden_act=%r; vit_jax computes GELU with the tanh "
        'approximation of the official model: its logits move slightly '
        '(README, "Checkpoints from anywhere").', path, act)
  key = _PREFIX + 'embeddings.position_embeddings'
  if key not in state:
    raise CheckpointError(f'{path} is not a transformers ViT: it has no '
                          'embeddings.position_embeddings.')
  heads = vit_model.num_heads(state[key].shape[-1], model_name=model_name,
                              stated=config_dict.get('num_attention_heads'),
                              source=str(path))
  return from_state(state, heads, str(path))

"""formats.timm: timm's VisionTransformer layout, in and out, exactly."""

import json

import numpy as np
import pytest

from tests.conftest import one_block_vit
from tests.conftest import random_vit_params
from tests.test_formats_npz import assert_trees_identical
from vit_jax import models
from vit_jax.errors import CheckpointError
from vit_jax.formats import safetensors_file
from vit_jax.formats import timm
from vit_jax.formats import vit_model

# The largest families' arrays take a second each: slow.
FAMILIES = ['ViT-Ti_16', 'ViT-S_32', 'ViT-Tiny-CIFAR_4',
            *(pytest.param(name, marks=pytest.mark.slow)
              for name in ('ViT-B_8', 'ViT-L_16', 'ViT-H_14'))]


@pytest.mark.parametrize('name', FAMILIES)
@pytest.mark.parametrize('classifier', ['token', 'gap'])
def test_ours_to_timm_to_ours_is_exact(tmp_path, name, classifier):
  model, params = one_block_vit(name, classifier=classifier)
  image_size = 2 * model.patch_size
  timm.write(tmp_path / 'timm', params, model, image_size)
  # The heads from config.json, then from the registered ViTs of the width.
  assert_trees_identical(timm.read(tmp_path / 'timm', None), params)
  bare = tmp_path / 'timm' / 'model.safetensors'
  assert_trees_identical(timm.read(bare, None), params)
  back, size = vit_model.model_for(timm.read(bare, None), source='x')
  assert size == image_size
  assert (back.num_heads, back.classifier, back.num_classes) == (
      model.num_heads, classifier, 7)


def test_the_names_and_shapes_are_timms():
  """timm's documented layout (timm/models/vision_transformer.py:
  PatchEmbed.proj, Block.norm1/attn.qkv/attn.proj/norm2/mlp.fc1/fc2, norm,
  head) for a ViT-Ti/16 of 7 classes at 32x32."""
  model = models.create_model('ViT-Ti_16', 7)
  state = timm.to_state(random_vit_params(model, 32))
  expected = {
      'cls_token': (1, 1, 192),
      'pos_embed': (1, 5, 192),
      'patch_embed.proj.weight': (192, 3, 16, 16),
      'patch_embed.proj.bias': (192,),
      'norm.weight': (192,),
      'norm.bias': (192,),
      'head.weight': (7, 192),
      'head.bias': (7,),
  }
  for i in range(12):
    expected.update({
        f'blocks.{i}.norm1.weight': (192,),
        f'blocks.{i}.norm1.bias': (192,),
        f'blocks.{i}.attn.qkv.weight': (576, 192),
        f'blocks.{i}.attn.qkv.bias': (576,),
        f'blocks.{i}.attn.proj.weight': (192, 192),
        f'blocks.{i}.attn.proj.bias': (192,),
        f'blocks.{i}.norm2.weight': (192,),
        f'blocks.{i}.norm2.bias': (192,),
        f'blocks.{i}.mlp.fc1.weight': (768, 192),
        f'blocks.{i}.mlp.fc1.bias': (768,),
        f'blocks.{i}.mlp.fc2.weight': (192, 768),
        f'blocks.{i}.mlp.fc2.bias': (192,),
    })
  assert {key: value.shape for key, value in state.items()} == expected


def test_qkv_is_query_key_value_in_that_order_heads_flattened():
  model, params = one_block_vit('ViT-Tiny-CIFAR_4')
  state = timm.to_state(params)
  attention = params['Transformer']['encoderblock_0'][
      'MultiHeadDotProductAttention_0']
  query, key, value = np.split(state['blocks.0.attn.qkv.weight'], 3)
  np.testing.assert_array_equal(
      value[32:64], attention['value']['kernel'][:, 1, :].T)  # head 1
  np.testing.assert_array_equal(query, attention['query']['kernel'].reshape(
      128, 128).T)
  np.testing.assert_array_equal(key, attention['key']['kernel'].reshape(
      128, 128).T)


def test_the_config_builds_timms_model_of_our_logits(tmp_path):
  model, params = one_block_vit('ViT-S_32', classifier='gap')
  timm.write(tmp_path, params, model, 64)
  written = json.loads((tmp_path / 'config.json').read_text())
  assert written['model_args'] == {
      'img_size': 64, 'patch_size': 32, 'embed_dim': 384, 'depth': 1,
      'num_heads': 6, 'mlp_ratio': 4.0, 'qkv_bias': True,
      'class_token': False, 'global_pool': 'avg', 'fc_norm': False,
      'act_layer': 'gelu_tanh', 'norm_layer': 'layernorm', 'num_classes': 7}
  assert written['pretrained_cfg']['mean'] == [0.5, 0.5, 0.5]
  assert written['pretrained_cfg']['input_size'] == [3, 64, 64]


@pytest.mark.parametrize('fields,feature', [
    (dict(representation_size=5), 'pre-logits layer'),
    (dict(classifier='map'), 'MAP head'),
    (dict(posemb='sincos2d'), "position embedding 'sincos2d'"),
])
def test_what_timm_cannot_hold_is_one_line(tmp_path, fields, feature):
  model, params = one_block_vit('ViT-Tiny-CIFAR_4', **fields)
  with pytest.raises(CheckpointError, match=f"timm's VisionTransformer has "
                     f'no {feature}.*convert it with --format=npz'):
    timm.write(tmp_path, params, model, 32)
  assert not list(tmp_path.iterdir())


def _written(tmp_path):
  model, params = one_block_vit('ViT-Tiny-CIFAR_4')
  timm.write(tmp_path / 'timm', params, model, 8)
  path = tmp_path / 'timm' / 'model.safetensors'
  return path, safetensors_file.read(path)


def test_one_wrong_shape_is_one_line_naming_the_key(tmp_path):
  path, state = _written(tmp_path)
  state['blocks.0.mlp.fc2.bias'] = np.zeros(127, np.float32)
  safetensors_file.write(path, state)
  with pytest.raises(CheckpointError) as error:
    timm.read(path, None)
  assert str(error.value) == (
      f'blocks.0.mlp.fc2.bias has shape (127,) in {path} but (128,) in '
      "timm's layout of a ViT with hidden size 128, 1 layer of 4 heads, MLP "
      '512, patch 4x4.')


@pytest.mark.parametrize('key,what', [
    ('fc_norm.weight', 'a final norm after the pooling'),
    ('dist_token', "DeiT's distillation token"),
    ('reg_token', 'register tokens'),
])
def test_a_timm_model_of_another_design_is_one_line(tmp_path, key, what):
  path, state = _written(tmp_path)
  state[key] = np.zeros(128, np.float32)
  safetensors_file.write(path, state)
  with pytest.raises(CheckpointError, match=f'holds a timm ViT with {what}'):
    timm.read(path, None)


def test_a_width_no_registered_vit_has_needs_its_heads(tmp_path):
  model = models.create_model('ViT-Tiny-CIFAR_4', 3, hidden_size=96,
                              num_heads=6, mlp_dim=64, num_layers=1)
  params = random_vit_params(model, 8)
  timm.write(tmp_path, params, model, 8)
  assert_trees_identical(timm.read(tmp_path, None), params)  # config.json has them
  with pytest.raises(CheckpointError, match='hidden size 96, which no '
                     'registered ViT has, and does not say its number of '
                     'heads: pass --model=NAME'):
    timm.read(tmp_path / 'model.safetensors', None)


def test_a_backbone_without_a_head_reads_for_fine_tuning(tmp_path):
  path, state = _written(tmp_path)
  del state['head.weight'], state['head.bias']
  safetensors_file.write(path, state)
  assert 'head' not in timm.read(path, None)

"""formats.timm: timm's VisionTransformer layout, in and out, exactly."""

import json

import numpy as np
import pytest

from tests import helpers
from tests.test_formats_npz import assert_trees_identical
from vit_jax import models
from vit_jax.errors import CheckpointError
from vit_jax.formats import safetensors_file
from vit_jax.formats import timm
from vit_jax.formats import vit_model

# The largest families' arrays take a second each: slow.
FAMILIES = [('ViT-S_32', 'gap'), ('ViT-Tiny-CIFAR_4', 'token'),
            *(pytest.param(name, 'token', marks=pytest.mark.slow)
              for name in ('ViT-B_8', 'ViT-L_16', 'ViT-H_14'))]


@pytest.mark.parametrize('name,classifier', FAMILIES)
def test_ours_to_timm_to_ours_is_exact(tmp_path, name, classifier):
  model, params = helpers.one_block_vit(name, classifier=classifier)
  image_size = 2 * model.patch_size
  timm.write(tmp_path / 'timm', params, model, image_size)
  # The heads from config.json, then from the registered ViTs of the width.
  assert_trees_identical(timm.read(tmp_path / 'timm', None), params)
  from_bare = timm.read(tmp_path / 'timm' / 'model.safetensors', None)
  assert_trees_identical(from_bare, params)
  back, size = vit_model.model_for(from_bare, source='x')
  assert timm.pixels(tmp_path / 'timm') == vit_model.RELEASED_PIXELS
  assert (back.num_heads, back.classifier, back.num_classes,
          size) == (model.num_heads, classifier, 7, image_size)


def test_the_names_and_shapes_are_timms():
  """timm/models/vision_transformer.py's layout, ViT-Ti/16 at 32x32."""
  params = helpers.random_vit_params(models.create_model('ViT-Ti_16', 7), 32)
  state = timm.to_state(params)
  expected = {'cls_token': (1, 1, 192), 'pos_embed': (1, 5, 192)}
  expected |= {'head.weight': (7, 192), 'head.bias': (7,)}
  expected['patch_embed.proj.weight'] = (192, 3, 16, 16)
  expected |= dict.fromkeys(
      ('patch_embed.proj.bias', 'norm.weight', 'norm.bias'), (192,))
  for i in range(12):
    for layer, out, fan_in in (('norm1', 192, None), ('attn.qkv', 576, 192),
                               ('attn.proj', 192, 192), ('norm2', 192, None),
                               ('mlp.fc1', 768, 192), ('mlp.fc2', 192, 768)):
      expected[f'blocks.{i}.{layer}.weight'] = ((out, fan_in) if fan_in else
                                                (out,))
      expected[f'blocks.{i}.{layer}.bias'] = (out,)
  assert {key: value.shape for key, value in state.items()} == expected
  # qkv is query, key and value in that order, their heads flattened.
  attention = params['Transformer']['encoderblock_0'][
      'MultiHeadDotProductAttention_0']
  for name, rows in zip(('query', 'key', 'value'),
                        np.split(state['blocks.0.attn.qkv.weight'], 3)):
    np.testing.assert_array_equal(rows,
                                  attention[name]['kernel'].reshape(192, 192).T)


def _written(tmp_path, changes, drop=()):
  """A one-block ViT's model.safetensors with `changes`, without `drop`."""
  model, params = helpers.one_block_vit('ViT-Tiny-CIFAR_4')
  timm.write(tmp_path / 'timm', params, model, 8)
  path = tmp_path / 'timm' / 'model.safetensors'
  state = safetensors_file.read(path)
  safetensors_file.write(
      path, {**{k: v for k, v in state.items() if k not in drop}, **changes})
  return path


def test_one_wrong_shape_is_one_line_and_a_missing_head_is_a_backbone(tmp_path):
  path = _written(tmp_path,
                  {'blocks.0.mlp.fc2.bias': np.zeros(127, np.float32)})
  with pytest.raises(CheckpointError) as error:
    timm.read(path, None)
  assert str(error.value) == (
      f'blocks.0.mlp.fc2.bias has shape (127,) in {path} but (128,) in '
      "timm's layout of a ViT with hidden size 128, 1 layer of 4 heads, MLP "
      '512, patch 4x4.')
  path = _written(tmp_path, {}, drop=('head.weight', 'head.bias'))
  assert 'head' not in timm.read(path, None)  # read for fine-tuning
  # A class token beside pooled tokens: neither of the official heads.
  helpers.edit_json(path.parent / 'config.json', global_pool='avg')
  with pytest.raises(CheckpointError, match="global_pool='avg'.* class token"):
    timm.read(path.parent, None)
  # 1x4 patches, as many as its 2x2: timm builds model_args' img_size, else
  # pretrained_cfg's input_size.
  for size in (dict(pretrained_cfg=dict(input_size=[3, 4, 16]), model_args={}),
               dict(model_args=dict(img_size=[4, 16]), pretrained_cfg={})):
    helpers.edit_json(path.parent / 'config.json', global_pool='token', **size)
    with pytest.raises(CheckpointError, match='says its images are 4x16: only'):
      timm.read(path.parent, None)


@pytest.mark.parametrize(
    'key,shape,said',
    [
        ('fc_norm.weight',
         (128,), 'holds a timm ViT with a final norm after the pooling'),
        ('dist_token',
         (128,), "holds a timm ViT with DeiT's distillation token"),
        ('reg_token', (128,), 'holds a timm ViT with register tokens'),
        # timm's ResNet-D hybrids (vit_small_resnet26d_224).
        ('patch_embed.backbone.conv1.0.weight', (32, 3, 3, 3),
         r'holds a timm hybrid whose backbone is not the official ResNet stem '
         r'\(patch_embed.backbone.conv1.0.weight\)'),
        ('patch_embed.backbone.stem.conv.weight', (48, 3, 7, 7),
         r'patch_embed.backbone.stem.conv.weight in .* has 48 output channels; '
         'the ResNet stem of the official hybrid has 64 per unit of width factor'
        ),
    ])
def test_a_timm_model_of_another_design_is_one_line(tmp_path, key, shape, said):
  path = _written(tmp_path, {key: np.zeros(shape, np.float32)})
  with pytest.raises(CheckpointError, match=said):
    timm.read(path, None)


def test_a_width_no_registered_vit_has_needs_its_heads(tmp_path):
  model, params = helpers.one_block_vit('ViT-Tiny-CIFAR_4', hidden_size=96,
                                        num_heads=6, mlp_dim=64)
  timm.write(tmp_path, params, model, 8)
  # config.json has them.
  assert_trees_identical(timm.read(tmp_path, None), params)
  with pytest.raises(
      CheckpointError, match='hidden size 96, which no registered '
      'ViT has, and does not say its number of heads: keep the config.json'):
    timm.read(tmp_path / 'model.safetensors', None)


def _hybrid(stages):
  """A one-block hybrid of `stages` (ViT-Ti's width, 1x1 patches)."""
  return helpers.one_block_vit('R50+ViT-B_16', hidden_size=192, num_heads=3,
                               mlp_dim=768, resnet_stages=stages)


def test_the_hybrids_names_and_shapes_are_timms_and_the_root_goes_and_back(
    tmp_path):
  """timm's vision_transformer_hybrid.py and resnetv2.py, stages (1, 2), ()."""
  model, params = _hybrid((1, 2))
  state = timm.to_state(params)
  backbone = {
      key[len('patch_embed.backbone.'):]: value.shape
      for key, value in state.items() if key.startswith('patch_embed.backbone.')
  }

  def unit(stage, index, width, fan_in, projection):
    out = 4 * width
    shapes = {
        'conv1.weight': (width, fan_in, 1, 1), 'conv2.weight':
            (width, width, 3, 3), 'conv3.weight': (out, width, 1, 1),
    }
    for norm, channels in (('norm1', width), ('norm2', width), ('norm3', out)):
      shapes |= {f'{norm}.weight': (channels,), f'{norm}.bias': (channels,)}
    if projection:
      shapes |= {
          'downsample.conv.weight': (out, fan_in, 1, 1),
          'downsample.norm.weight': (out,), 'downsample.norm.bias': (out,)
      }
    prefix = f'stages.{stage}.blocks.{index}.'
    return {prefix + key: shape for key, shape in shapes.items()}

  assert backbone == {
      'stem.conv.weight': (64, 3, 7, 7), 'stem.norm.weight':
          (64,), 'stem.norm.bias': (64,), **unit(0, 0, 64, 64, True),
      **unit(1, 0, 128, 256, True), **unit(1, 1, 128, 512, False),
  }
  # The transformer's 1x1 patches of the stem's 512 channels.
  assert state['patch_embed.proj.weight'].shape == (192, 512, 1, 1)
  model, params = _hybrid(())
  assert {key for key in timm.to_state(params) if 'backbone' in key} == {
      'patch_embed.backbone.conv.weight', 'patch_embed.backbone.norm.weight',
      'patch_embed.backbone.norm.bias'
  }
  image_size = 2 * model.effective_patch_size
  timm.write(tmp_path, params, model, image_size)
  back = timm.read(tmp_path, None)
  assert_trees_identical(back, params)
  read_model, size = vit_model.model_for(back, source='x')
  assert (read_model.resnet_stages, read_model.resnet_width_factor,
          size) == ((), 1, image_size)
  written = json.loads((tmp_path / 'config.json').read_text())
  assert (written['architecture'],
          written['model_args']['patch_size']) == ('vit_tiny_r_s16_p8_224', 1)


def test_the_hub_folder_builds_timms_model_of_our_logits_and_pixels(tmp_path):
  model, params = helpers.one_block_vit('ViT-S_32', classifier='gap')
  imagenet = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
  timm.write(tmp_path, params, model, 64, imagenet)
  written = json.loads((tmp_path / 'config.json').read_text())
  assert written['model_args'] == dict(
      img_size=64, patch_size=32, embed_dim=384, depth=1, num_heads=6,
      mlp_ratio=4.0, qkv_bias=True, class_token=False, global_pool='avg',
      fc_norm=False, act_layer='gelu_tanh', norm_layer='layernorm',
      num_classes=7)
  assert written['pretrained_cfg']['input_size'] == [3, 64, 64]
  assert written['pretrained_cfg']['crop_mode'] == 'squash'  # resized whole
  assert written['pretrained_cfg']['mean'] == list(imagenet[0])
  assert timm.pixels(tmp_path) == imagenet
  # Older hub configs state them at the top level; one that states none
  # gets timm's ImageNet defaults, as timm.create_model gives it.
  del written['pretrained_cfg']
  (tmp_path / 'config.json').write_text(
      json.dumps({**written, 'mean': [0.5] * 3, 'std': 0.25}))
  assert timm.pixels(tmp_path) == ((0.5,) * 3, (0.25,) * 3)
  (tmp_path / 'config.json').write_text(json.dumps(written))
  assert timm.pixels(tmp_path) == imagenet
  # The weights alone: the released models' [-1, 1].
  assert timm.pixels(tmp_path /
                     'model.safetensors') == (vit_model.RELEASED_PIXELS)
  (tmp_path / 'config.json'
  ).write_text('{"pretrained_cfg": {"mean": "x", "std": [1, 1, NaN]}}')
  with pytest.raises(
      CheckpointError, match=r"states the pixel mean 'x' and "
      r'std \[1, 1, nan\]: each must be 3 finite numbers'):
    timm.pixels(tmp_path)

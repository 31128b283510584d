"""Fitting a pre-trained tree to a new model, every misfit named."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from vit_jax import models
from vit_jax.errors import CheckpointError
from vit_jax.formats import params as params_lib


def test_resize_zooms_the_grid_bilinearly_keeping_its_dtype():
  # A 2x2 grid of 1-d embeddings [[0, 1], [2, 3]] to 3x3: corners stay, the
  # rest interpolates linearly between them (scipy.ndimage.zoom, order 1).
  grid = np.array([0.0, 1.0, 2.0, 3.0]).reshape(1, 4, 1)
  resized = params_lib.resize_patch_grid(grid, 9)
  assert resized.shape == (1, 9, 1)
  np.testing.assert_allclose(resized[0, :, 0],
                             [0.0, 0.5, 1.0, 1.0, 1.5, 2.0, 2.0, 2.5, 3.0])
  grid = np.random.default_rng(0).normal(size=(1, 16, 3)).astype(np.float32)
  np.testing.assert_allclose(params_lib.resize_patch_grid(grid, 16), grid,
                             atol=1e-6)
  assert params_lib.resize_patch_grid(grid, 64).dtype == np.float32
  with pytest.raises(CheckpointError, match='only square grids'):
    params_lib.resize_patch_grid(grid, 15)
  assert params_lib.resize_patch_grid(grid.astype(jnp.bfloat16),
                                      64).dtype == (jnp.bfloat16)


SMALL_VIT = dict(num_layers=1, hidden_size=8, num_heads=2, mlp_dim=16)


def vit_params(image_size, num_classes, seed=0, **overrides):
  """A `SMALL_VIT` ViT-Tiny-CIFAR_4's random parameters at `image_size`."""
  model = models.create_model('ViT-Tiny-CIFAR_4', num_classes,
                              **{**SMALL_VIT, **overrides})
  return helpers.random_vit_params(model, image_size, seed)


def positions(params):
  return params['Transformer']['posembed_input']['pos_embedding']


equal = np.testing.assert_array_equal


def test_adapt_resizes_positions_replaces_the_head_and_drops_pre_logits():
  pretrained = vit_params(16, 100, representation_size=8)
  fresh = vit_params(24, 10, seed=1)
  adapted = params_lib.adapt_params(pretrained, fresh)
  assert jax.tree.structure(adapted) == jax.tree.structure(fresh)
  assert 'pre_logits' not in adapted
  equal(adapted['head']['kernel'], fresh['head']['kernel'])
  equal(adapted['embedding']['kernel'], pretrained['embedding']['kernel'])
  # [CLS]'s row kept, the grid zoomed.
  theirs = positions(pretrained)
  zoomed = params_lib.resize_patch_grid(theirs[:, 1:], 36)
  equal(positions(adapted), np.concatenate([theirs[:, :1], zoomed], axis=1))


def test_a_distillation_token_is_added_or_left_out():
  # DeiT's distillation token sits between [CLS] and the patches: a ViT
  # checkpoint lacks it, and its position row, which start as the new
  # model's; the rest is the checkpoint's, the grid resized.
  pretrained = vit_params(16, 10)
  fresh = vit_params(24, 10, seed=1, distillation_token=True)
  adapted = params_lib.adapt_params(pretrained, fresh)
  assert jax.tree.structure(adapted) == jax.tree.structure(fresh)
  equal(adapted['dist'], fresh['dist'])
  equal(adapted['cls'], pretrained['cls'])
  table, theirs = positions(adapted), positions(pretrained)
  equal(table[:, 0], theirs[:, 0])
  equal(table[:, 1], positions(fresh)[:, 1])
  equal(table[:, 2:], params_lib.resize_patch_grid(theirs[:, 1:], 36))
  params_lib.check_fit(pretrained, jax.eval_shape(lambda: fresh))
  # A distilled checkpoint fits a ViT without the token: its row goes.
  distilled = vit_params(16, 10, seed=2, distillation_token=True)
  adapted = params_lib.adapt_params(distilled, pretrained)
  assert jax.tree.structure(adapted) == jax.tree.structure(pretrained)
  theirs = positions(distilled)
  equal(positions(adapted),
        np.concatenate([theirs[:, :1], theirs[:, 2:]], axis=1))


def test_each_misfit_is_named():
  # A head reading [CLS] and one pooling the patches are other models: the
  # token is named, not made up or dropped.
  with pytest.raises(
      CheckpointError, match='^cls .* is in the checkpoint but '
      'not in the new model'):
    params_lib.adapt_params(vit_params(16, 10),
                            vit_params(16, 10, classifier='gap'))
  with pytest.raises(CheckpointError, match='^cls is missing from the '
                     'checkpoint'):
    params_lib.check_fit(vit_params(16, 10, classifier='gap'),
                         jax.eval_shape(lambda: vit_params(16, 10)))
  # A token and another width: the widths are named, not the table.
  with pytest.raises(CheckpointError, match='does not fit'):
    params_lib.adapt_params(
        vit_params(16, 10),
        vit_params(16, 10, hidden_size=16, distillation_token=True))
  deeper = vit_params(16, 10, num_layers=2)
  with pytest.raises(
      CheckpointError, match='Transformer/encoderblock_1/LayerNorm_0/bias is '
      'missing from the checkpoint'):
    params_lib.adapt_params(vit_params(16, 10), deeper)
  with pytest.raises(
      CheckpointError, match='Transformer/encoderblock_1/LayerNorm_0/bias '
      r'\(shape \(8,\)\) is in the checkpoint but not in '
      r'the new model \(config.model\)'):
    params_lib.adapt_params(deeper, vit_params(16, 10))


def test_the_architecture_is_read_from_the_shapes():
  architecture = params_lib.vit_architecture(vit_params(16, 10, num_layers=2))
  assert (architecture, params_lib.describe_architecture(architecture)) == (
      dict(hidden_size=8, num_layers=2, num_heads=2, mlp_dim=16, patch_size=4,
           resnet_stages=None, resnet_width_factor=None),
      'a ViT with hidden size 8, 2 layers of 2 heads, MLP 16, patch 4x4')
  shifted = models.create_model('ViT-Tiny-CIFAR_4', 3, shifted_patches=True)
  assert params_lib.describe_architecture(
      params_lib.vit_architecture(params_lib.param_shapes(
          shifted, 32))).endswith('MLP 512, shifted patches')
  hybrid = models.create_model('R50+ViT-B_16', 3, num_layers=1,
                               resnet_stages=(2, 1), resnet_width_factor=2)
  architecture = params_lib.vit_architecture(params_lib.param_shapes(
      hybrid, 32))
  assert (architecture['resnet_stages'],
          architecture['resnet_width_factor']) == ((2, 1), 2)
  assert params_lib.describe_architecture(architecture) == (
      'a ViT on a ResNet stem of stages (2, 1), width factor 2 with hidden '
      'size 768, 1 layer of 12 heads, MLP 3072, patch 1x1')
  cnn = models.create_model('SimpleCNN', 10)
  assert params_lib.vit_architecture(params_lib.param_shapes(cnn, 32)) is None


def test_blocks_stack_for_a_scanned_model_and_back_and_adapt_to_either():
  official = vit_params(16, 10, num_layers=3)
  stacked = params_lib.stack_blocks(official)
  scanned = vit_params(16, 10, num_layers=3, scan=True)
  assert jax.tree.map(np.shape, stacked) == jax.tree.map(np.shape, scanned)
  np.testing.assert_array_equal(
      stacked['Transformer']['encoderblock']['LayerNorm_0']['scale'][2],
      official['Transformer']['encoderblock_2']['LayerNorm_0']['scale'])
  assert params_lib.is_stacked(stacked) and not params_lib.is_stacked(official)
  jax.tree.map(np.testing.assert_array_equal,
               params_lib.unstack_blocks(stacked), official)
  # Each is the identity on the other layout, and on a tree without blocks.
  assert params_lib.stack_blocks(stacked) == stacked
  assert params_lib.unstack_blocks(official) == official
  cnn = {'conv': {'kernel': np.zeros(3)}}
  assert params_lib.stack_blocks(cnn) == params_lib.unstack_blocks(cnn) == cnn
  # The architecture is the same whichever the layout, shapes or arrays.
  architecture = params_lib.vit_architecture(official)
  assert architecture['num_layers'] == 3
  assert params_lib.vit_architecture(scanned) == params_lib.vit_architecture(
      jax.eval_shape(lambda: scanned)) == architecture
  # Adapting stacks or unstacks to the new model's layout.
  for pretrained, scan in ((official, True), (stacked, False)):
    fresh = vit_params(24, 10, num_layers=3, scan=scan)
    adapted = params_lib.adapt_params(pretrained, fresh)
    assert jax.tree.map(np.shape, adapted) == jax.tree.map(np.shape, fresh)
    jax.tree.map(
        np.testing.assert_array_equal,
        params_lib.unstack_blocks(adapted)['Transformer']['encoderblock_1'],
        official['Transformer']['encoderblock_1'])

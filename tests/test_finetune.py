"""Fitting pre-trained parameters to a fine-tuning model."""

import jax
import numpy as np
import pytest

from tests.conftest import tiny_config
from vit_jax import checkpoint
from vit_jax import finetune
from vit_jax import models
from vit_jax import config_schema
from vit_jax import steps
from vit_jax import train


def test_resize_keeps_the_class_token_and_zooms_the_grid_bilinearly():
  # A 2x2 grid of 1-d embeddings [[0, 1], [2, 3]] to 3x3: corners stay, the
  # rest interpolates linearly between them (scipy.ndimage.zoom, order 1).
  table = np.array([9.0, 0.0, 1.0, 2.0, 3.0]).reshape(1, 5, 1)
  resized = finetune.resize_position_embeddings(table, 10, num_prefix_tokens=1)
  assert resized.shape == (1, 10, 1)
  np.testing.assert_allclose(
      resized[0, :, 0], [9.0, 0.0, 0.5, 1.0, 1.0, 1.5, 2.0, 2.0, 2.5, 3.0])


def test_resize_without_class_token_and_to_the_same_size():
  table = np.random.default_rng(0).normal(size=(1, 16, 3)).astype(np.float32)
  np.testing.assert_allclose(
      finetune.resize_position_embeddings(table, 16, num_prefix_tokens=0),
      table, atol=1e-6)
  assert finetune.resize_position_embeddings(
      table, 64, num_prefix_tokens=0).dtype == np.float32
  with pytest.raises(checkpoint.CheckpointError, match='only square grids'):
    finetune.resize_position_embeddings(table, 15, num_prefix_tokens=0)


def _params(image_size, num_classes, **overrides):
  fields = dict(num_layers=1, hidden_size=8, num_heads=2, mlp_dim=16)
  model = models.create_model('ViT-Tiny-CIFAR_4', num_classes,
                              **{**fields, **overrides})
  variables = model.init(jax.random.key(0), np.zeros((1, image_size,
                                                      image_size, 3)),
                         train=False)
  return jax.device_get(variables['params'])


def test_adapt_resizes_positions_replaces_the_head_and_drops_pre_logits():
  pretrained = _params(16, 100, representation_size=8)
  pretrained['head']['kernel'] = np.ones_like(pretrained['head']['kernel'])
  fresh = _params(24, 10)
  adapted = finetune.adapt_params(pretrained, fresh, num_prefix_tokens=1)
  assert jax.tree.structure(adapted) == jax.tree.structure(fresh)
  assert 'pre_logits' not in adapted
  np.testing.assert_array_equal(adapted['head']['kernel'], 0.0)
  assert adapted['head']['kernel'].shape == (8, 10)
  np.testing.assert_array_equal(adapted['embedding']['kernel'],
                                pretrained['embedding']['kernel'])
  np.testing.assert_array_equal(
      adapted['Transformer']['posembed_input']['pos_embedding'],
      finetune.resize_position_embeddings(
          pretrained['Transformer']['posembed_input']['pos_embedding'], 37,
          num_prefix_tokens=1))


def test_adapt_names_the_key_that_does_not_fit():
  with pytest.raises(checkpoint.CheckpointError,
                     match=r'encoderblock_0/MlpBlock_0/Dense_0/bias has '
                     r'shape \(16,\) in the checkpoint but \(32,\)'):
    finetune.adapt_params(_params(16, 10), _params(16, 10, mlp_dim=32),
                          num_prefix_tokens=1)
  deeper = _params(16, 10, num_layers=2)
  with pytest.raises(checkpoint.CheckpointError,
                     match='Transformer/encoderblock_1/LayerNorm_0/bias is '
                     'missing from the checkpoint'):
    finetune.adapt_params(_params(16, 10), deeper, num_prefix_tokens=1)
  with pytest.raises(checkpoint.CheckpointError,
                     match='Transformer/encoderblock_1/LayerNorm_0/bias '
                     r'\(shape \(8,\)\) is in the checkpoint but not in '
                     r'the new model \(config.model\)'):
    finetune.adapt_params(deeper, _params(16, 10), num_prefix_tokens=1)


@pytest.mark.slow  # 13 s; test_configs fine-tunes a .npz end to end
def test_fine_tunes_a_run_at_a_higher_resolution(trained_vit_run, tmp_path):
  workdir, data_dir = trained_vit_run  # 2 layers at 24x24: a 3x3 grid
  config = tiny_config(data_dir, init_from=str(workdir), image_size=32,
                       optimizer='sgd', weight_decay=0.0, grad_clip_norm=1.0,
                       learning_rate=0.01, num_epochs=1, batch_size=32,
                       grad_accumulation_steps=2)
  config.model_overrides.num_layers = 2
  model = models.from_config(config, num_classes=10)
  fresh = _params(32, 10, num_layers=2, hidden_size=16, num_heads=2,
                  mlp_dim=32, patch_size=8)
  start = finetune.pretrained_params(config, model, fresh)
  pretrained = checkpoint.load_run(workdir).params
  np.testing.assert_array_equal(
      start['Transformer']['encoderblock_1']['LayerNorm_0']['scale'],
      pretrained['Transformer']['encoderblock_1']['LayerNorm_0']['scale'])
  assert start['Transformer']['posembed_input']['pos_embedding'].shape == (
      1, 17, 16)
  summary = train.train_and_evaluate(config, tmp_path)
  assert np.isfinite(summary['best_test_accuracy'])


def test_a_bad_init_from_is_a_config_error_before_writing(cifar10_binary,
                                                          tmp_path):
  data_dir, _ = cifar10_binary
  config = tiny_config(data_dir, init_from=str(tmp_path / 'missing'))
  with pytest.raises(config_schema.ConfigError, match='config.init_from='):
    train.train_and_evaluate(config, tmp_path / 'run')
  assert not (tmp_path / 'run').exists()


@pytest.mark.slow  # ~35 s: a 12-layer ViT at 577 tokens
def test_released_vit_ti_16_fine_tunes_at_384_from_224(cifar10_binary,
                                                         tmp_path):
  # A ViT-Ti_16 .npz in the released layout (224x224, 21k classes, with
  # pre_logits), fine-tuned at 384x384 for 10 classes by config alone.
  data_dir, _ = cifar10_binary
  released = models.create_model('ViT-Ti_16', 21843, representation_size=192)
  shapes = checkpoint.param_shapes(released, 224)
  rng = np.random.default_rng(0)
  params = jax.tree.map(
      lambda s: rng.normal(0, 0.02, s.shape).astype(np.float32), shapes)
  checkpoint.save_npz(params, tmp_path / 'ViT-Ti_16.npz')

  config = tiny_config(data_dir, model='ViT-Ti_16',
                       init_from=str(tmp_path / 'ViT-Ti_16.npz'),
                       image_size=384, batch_size=2, eval_batch_size=2,
                       train_examples=2, test_examples=2, num_epochs=1,
                       optimizer='sgd', weight_decay=0.0, grad_clip_norm=1.0,
                       learning_rate=0.01)
  config.model_overrides = {}  # the registered ViT-Ti_16
  summary = train.train_and_evaluate(config, tmp_path / 'run')
  assert summary['epochs'] == 1
  tuned = checkpoint.load_run(tmp_path / 'run').params
  assert 'pre_logits' not in tuned
  assert tuned['head']['kernel'].shape == (192, 10)
  assert tuned['Transformer']['posembed_input']['pos_embedding'].shape == (
      1, 577, 192)
  # The one step ran at the warmup's learning rate 0, so the run holds the
  # fitted checkpoint itself: same filters, class-token position kept.
  np.testing.assert_array_equal(tuned['embedding']['kernel'],
                                params['embedding']['kernel'])
  np.testing.assert_array_equal(
      tuned['Transformer']['posembed_input']['pos_embedding'][0, 0],
      params['Transformer']['posembed_input']['pos_embedding'][0, 0])

"""Fitting pre-trained parameters to a fine-tuning model, before data loads."""

import pickle

import jax
import numpy as np
import pytest

from tests import helpers
from tests.test_formats_npz import assert_trees_identical
from tests.test_formats_params import positions
from tests.test_formats_params import SMALL_VIT
from tests.test_formats_params import vit_params
from vit_jax import models
from vit_jax.checkpoints import export
from vit_jax.checkpoints import reading
from vit_jax.errors import ConfigError
from vit_jax.formats import npz
from vit_jax.formats import params as params_lib
from vit_jax.training import finetune
from vit_jax.training import train


@pytest.mark.slow  # ~35 s: a 12-layer ViT at 577 tokens
def test_released_vit_ti_16_fine_tunes_at_384_from_224(cifar10_dir, tmp_path,
                                                       caplog):
  # A ViT-Ti_16 .npz in the released layout (224x224, 21k classes, with
  # pre_logits), fine-tuned at 384x384 for 10 classes by config alone.
  released = models.create_model('ViT-Ti_16', 21843, representation_size=192)
  shapes = params_lib.param_shapes(released, 224)
  rng = np.random.default_rng(0)
  params = jax.tree.map(
      lambda s: rng.normal(0, 0.02, s.shape).astype(np.float32), shapes)
  npz.save_npz(params, tmp_path / 'ViT-Ti_16.npz')

  config = helpers.tiny_config(
      cifar10_dir, model='ViT-Ti_16', init_from=str(tmp_path / 'ViT-Ti_16.npz'),
      image_size=384, batch_size=2, eval_batch_size=2, train_examples=2,
      test_examples=2, num_epochs=1, optimizer='sgd', weight_decay=0.0,
      grad_clip_norm=1.0, learning_rate=0.01)
  config.model_overrides = {}  # the registered ViT-Ti_16
  assert train.train_and_evaluate(config, tmp_path / 'run')['epochs'] == 1
  assert 'npz states no normalization; if it is a released .npz' in caplog.text
  tuned = reading.load_run(tmp_path / 'run').params
  assert 'pre_logits' not in tuned
  assert tuned['head']['kernel'].shape == (192, 10)
  assert positions(tuned).shape == (1, 577, 192)
  # The one step ran at the warmup's learning rate 0, so the run holds the
  # fitted checkpoint itself: same filters, class-token position kept.
  np.testing.assert_array_equal(tuned['embedding']['kernel'],
                                params['embedding']['kernel'])
  np.testing.assert_array_equal(positions(tuned)[0, 0], positions(params)[0, 0])


@pytest.mark.parametrize('overrides', [
    dict(classifier='gap'),
    pytest.param(dict(classifier='map'), marks=pytest.mark.slow),
    dict(distillation_token=True),
    pytest.param(dict(posemb='learned'), marks=pytest.mark.slow),
    dict(scan=True, remat='full')
])
def test_any_vit_fine_tunes_at_a_new_resolution(overrides, tmp_path, caplog):
  # The prefix tokens ([CLS], the distillation token, none) are counted by
  # the model, so the patch grid is resized whatever the head, which the
  # log says once. A scanned model saves the official layout and starts
  # from it stacked. What the check before the data read is what fine-tuning
  # starts from.
  caplog.set_level('INFO', logger='absl')  # another test may have set it
  npz.save_npz(vit_params(16, 10, **overrides), tmp_path / 'small.npz')
  config = helpers.tiny_config('', init_from=str(tmp_path / 'small.npz'),
                               image_size=24)
  config.model_overrides = dict(SMALL_VIT, **overrides)
  fresh = vit_params(24, 10, **overrides)
  start = finetune.pretrained_params(config, fresh)
  tokens = 36 + len(models.from_config(config, num_classes=10).prefix_tokens)
  assert positions(start).shape == (1, tokens, 8)
  assert [m for m in caplog.messages if m.startswith('Resizing')] == [
      f'Resizing the position embeddings from (1, {tokens - 20}, 8) to '
      f'(1, {tokens}, 8).'
  ]
  assert_trees_identical(
      finetune.pretrained_params(config, fresh,
                                 finetune.check_init_from(config)), start)


def test_a_distilled_student_fine_tunes_from_a_vit_without_the_token(
    tmp_path, caplog):
  # An MAE's or a released ViT's encoder under DeiT's distillation: the
  # check before the data passes, and the token starts as the new model's,
  # which the run's log says once.
  caplog.set_level('INFO', logger='absl')  # another test may have set it
  npz.save_npz(vit_params(16, 10), tmp_path / 'plain.npz')
  config = helpers.tiny_config('', init_from=str(tmp_path / 'plain.npz'),
                               image_size=16)
  config.model_overrides = dict(SMALL_VIT, distillation_token=True)
  pretrained = finetune.check_init_from(config)
  fresh = vit_params(16, 10, distillation_token=True)
  start = finetune.pretrained_params(config, fresh, pretrained)
  np.testing.assert_array_equal(start['dist'], fresh['dist'])
  np.testing.assert_array_equal(start['cls'], pretrained['cls'])
  assert caplog.messages.count(
      'The checkpoint has no dist; it starts from scratch.') == 1


def test_another_architecture_is_one_line_naming_what_it_holds(tmp_path):
  shapes = params_lib.param_shapes(models.create_model('ViT-Ti_16', 10), 32)
  npz.save_npz(jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes),
               tmp_path / 'ViT-Ti_16.npz')
  config = helpers.tiny_config('', init_from=str(tmp_path / 'ViT-Ti_16.npz'))
  expected = (
      f"config.init_from='{tmp_path}/ViT-Ti_16.npz' holds a ViT with hidden "
      'size 192, 12 layers of 3 heads, MLP 768, patch 16x16 (ViT-Ti_16), but '
      "this run's model (config.model='ViT-Tiny-CIFAR_4' with its "
      'model_overrides) is a ViT with hidden size 16, 1 layer of 2 heads, MLP '
      '32, patch 8x8: pass a checkpoint of this model, or set '
      '--config.model=ViT-Ti_16 without model_overrides to fine-tune the one '
      'it holds.')
  with pytest.raises(ConfigError) as checked:
    finetune.check_init_from(config)
  assert str(checked.value) == expected
  with pytest.raises(ConfigError) as loaded:
    finetune.pretrained_params(
        config, vit_params(32, 10, hidden_size=16, mlp_dim=32, patch_size=8))
  assert str(loaded.value) == expected
  cnn = helpers.tiny_config('', 'simple_cnn',
                            init_from=str(tmp_path / 'ViT-Ti_16.npz'))
  with pytest.raises(
      ConfigError, match=r"holds a ViT with .* \(ViT-Ti_16\), but this run's "
      r"model \(config.model='SimpleCNN' with its "
      r'model_overrides\) is a model that is no ViT: '):
    finetune.check_init_from(cnn)


@pytest.mark.parametrize('content',
                         [b'not a zip', pickle.dumps({'a': 1})],
                         ids=['text', 'pickle'])
def test_a_file_that_is_no_npz_is_one_line_without_pickle_advice(
    tmp_path, content):
  (tmp_path / 'file.npz').write_bytes(content)
  config = helpers.tiny_config('', init_from=str(tmp_path / 'file.npz'))
  with pytest.raises(
      ConfigError, match=r"^config.init_from='.*/file.npz': .*file.npz is not "
      r"a .npz file \(a zip archive of arrays\): pass a released ViT .npz or "
      r"the workdir of a `vit_jax.main` run\.$") as error:
    finetune.check_init_from(config)
  assert 'pickle' not in str(error.value)


@pytest.mark.parametrize('format_name', ['timm', 'hf'])
def test_init_from_takes_timm_and_transformers_folders(tmp_path, format_name,
                                                       caplog):
  params = vit_params(16, 10)
  npz.save_npz(params, tmp_path / 'small.npz')
  export.convert(tmp_path / 'small.npz', tmp_path / format_name, format_name)
  config = helpers.tiny_config('', init_from=str(tmp_path / format_name),
                               image_size=16)
  config.model_overrides = dict(SMALL_VIT)
  assert_trees_identical(finetune.check_init_from(config), params)
  # The folder states the released models' [-1, 1]; the study's config
  # normalizes with CIFAR-10's mean and std: said, with what to pass.
  assert ('--config.pixel_mean=0.5,0.5,0.5 --config.pixel_std=0.5,0.5,0.5'
          in caplog.text)
  caplog.clear()
  config.pixel_mean = config.pixel_std = (0.5, 0.5, 0.5)
  finetune.check_init_from(config)
  assert 'normalized with' not in caplog.text

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.models import masked_autoencoder
from vit_jax.models import names
from vit_jax.errors import ConfigError
from vit_jax.objectives import losses
from vit_jax.training import startup
from tests import helpers

MAE = dict(mask_ratio=0.75, decoder_depth=1, decoder_width=32)


def _mae(vit=None, **fields):
  return masked_autoencoder.MaskedAutoencoder(
      helpers.small_vit(num_layers=1, **(vit or {})), **{**MAE, **fields})


PATCH = helpers.SMALL['patch_size']


@functools.partial(jax.jit, static_argnums=0)
def _train(model, variables, images):
  """Logits and training outputs, the same patches hidden every call."""
  return model.apply(variables, images, train=True, return_out=True,
                     rngs={'dropout': jax.random.key(3)})


def test_each_image_keeps_a_random_quarter_of_its_patches_and_masks_the_rest():
  kept = masked_autoencoder.kept_patches(jax.random.key(0), 3, 16, 0.75)
  assert kept.shape == (3, 4)
  assert all(len(set(row)) == 4 for row in np.asarray(kept).tolist())
  assert len({tuple(row) for row in np.asarray(kept).tolist()}) == 3
  mask = np.asarray(masked_autoencoder.masked(kept, 3, 16))
  for row, dropped in zip(np.asarray(kept), mask):
    assert dropped[row].sum() == 0 and dropped.sum() == 12


def test_the_error_is_maes_normalized_pixel_loss_over_the_masked_patches():
  images = helpers.images(size=8)
  predictions = helpers.normal((2, 4, 48), 5)
  mask = jnp.array([[1.0, 0, 0, 1], [0, 1, 0, 0]])
  # Each image's 4x4 patches in the order of the tokens (row-major), their
  # pixels row by row: another order of either would change the errors.
  patches = np.asarray(images).reshape(2, 2, 4, 2, 4, 3).swapaxes(2, 3)
  target = patches.reshape(2, 4, 48)
  target = (target - target.mean(-1, keepdims=True)
           ) / np.sqrt(target.var(-1, keepdims=True, ddof=1) + 1e-6)
  error = ((np.asarray(predictions) - target)**2).mean(-1)
  np.testing.assert_allclose(
      masked_autoencoder.reconstruction_error(predictions, mask, images, 4),
      [(error[0, 0] + error[0, 3]) / 2, error[1, 1]], rtol=1e-5)
  np.testing.assert_allclose(
      masked_autoencoder.reconstruction_error(jnp.asarray(target), mask, images,
                                              4), [0, 0], atol=1e-6)
  # Nothing hidden (evaluation): no error, not 0/0.
  np.testing.assert_array_equal(
      masked_autoencoder.reconstruction_error(predictions, jnp.zeros((2, 4)),
                                              images, 4), [0, 0])


def test_the_encoder_never_sees_the_masked_patches_and_eval_is_the_plain_vit():
  model, images = _mae(), helpers.images()
  variables = {'params': helpers.random_params(model, images, train=False)}
  assert {p.split('/')[0] for p in helpers.flat(variables['params'])
         } - {'embedding', 'cls', 'Transformer', 'head'} == {'mae_decoder'}
  plain = {'params': names.inference_params(variables['params'])}
  assert 'mae_decoder' not in plain['params']
  np.testing.assert_array_equal(
      helpers.compiled(model.vit.apply, plain, images, train=False),
      helpers.compiled(model.apply, variables, images, train=False))
  assert helpers.param_shapes(model.vit,
                              images) == helpers.shapes(plain['params'])
  logits, outputs = _train(model, variables, images)
  assert outputs['mae_predictions'].shape == (2, 16, PATCH * PATCH * 3)
  mask = outputs['mae_mask']
  assert mask.shape == (2, 16) and set(np.asarray(mask.sum(1))) == {12}
  # Other pixels where the patches were hidden: the same predictions and
  # probe, with the same patches hidden.
  hidden = np.repeat(np.repeat(np.asarray(mask).reshape(2, 4, 4), PATCH, 1),
                     PATCH, 2)[..., None]
  changed = images + 5.0 * hidden
  changed_logits, changed_outputs = _train(model, variables, changed)
  np.testing.assert_allclose(changed_logits, logits, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(changed_outputs['mae_predictions'],
                             outputs['mae_predictions'], rtol=1e-5, atol=1e-5)
  # A shown patch changed changes them.
  _, shown = _train(model, variables, images + 5.0 * (1 - hidden))
  assert not np.allclose(shown['mae_predictions'], outputs['mae_predictions'])


def test_the_labels_train_the_probe_and_the_pixels_the_encoder():
  model, images = _mae(), helpers.images()
  params = helpers.random_params(model, images, train=False)
  targets = losses.soft_targets(jnp.array([1, 3]), 5)

  def gradients(objective):
    loss = lambda p: objective(*_train(model, {'params': p}, images), targets,
                               images).mean()
    return helpers.flat(jax.jit(jax.grad(loss))(params))

  probe = gradients(losses.classification)
  both = gradients(masked_autoencoder.objective(losses.classification, PATCH))
  for path, gradient in probe.items():
    reaches = path.startswith('head/')
    assert bool(np.any(gradient != 0)) == reaches, path
    if not reaches:
      assert np.any(both[path] != 0), path


@pytest.mark.parametrize('vit,fields,message', [
    ({}, dict(mask_ratio=1.0), r'must be in \[0, 1\)'),
    ({}, dict(decoder_width=48), 'positive multiple of 32'),
    ({}, dict(decoder_depth=0), 'at least one block'),
    (dict(shifted_patches=True), {}, 'shifted_patches=True gives each token'),
    (dict(resnet_stages=(1,)), {}, 'A ResNet stem gives each token'),
    (dict(posemb='none'), {}, "posemb='none' leaves the encoder"),
])
def test_fields_that_make_no_mae_are_refused_in_one_line(vit, fields, message):
  with pytest.raises(ValueError, match=message):
    _mae(vit, **fields)


def test_a_ratio_that_hides_every_patch_says_so():
  model, images = _mae(mask_ratio=0.99), helpers.images()
  variables = {'params': helpers.random_params(model, images, train=False)}
  with pytest.raises(ValueError, match='keeps none of 16 patches'):
    _train(model, variables, images)
  # A run of it is refused in one line before it compiles.
  config = helpers.tiny_config('', model_fields=dict(mae_mask_ratio=0.99))
  with pytest.raises(ConfigError, match='0.99 keeps none of 16 patches: lower'):
    startup.trained_model(config, 10)

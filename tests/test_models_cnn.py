"""The study's CNN baselines: shapes, BatchNorm, dtype, stage features."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.formats import params as params_lib
from vit_jax.models import SimpleCNN
from vit_jax.models import SmallResNet
from tests import helpers

MODELS = [SimpleCNN, SmallResNet]


@pytest.mark.parametrize('model_class', MODELS)
def test_batch_stats_train_only_eval_reads_them_and_bfloat16_is_close(
    model_class):
  model, images = model_class(num_classes=7), helpers.images(6, 32, seed=0)
  variables = helpers.random_cnn_variables(model, images)
  assert set(variables) == {'params', 'batch_stats'}
  _, stats = model.apply(variables, images, train=True, mutable=['batch_stats'])
  for before, after in zip(jax.tree.leaves(variables['batch_stats']),
                           jax.tree.leaves(stats['batch_stats'])):
    assert not np.allclose(before, after)

  # Eval needs no mutable collection: it only reads the running statistics.
  high = model.apply(variables, images, train=False)
  assert high.shape == (6, 7) and high.dtype == jnp.float32
  low = model_class(num_classes=7,
                    dtype=jnp.bfloat16).apply(variables, images, train=False)
  assert low.dtype == jnp.float32 and np.all(np.isfinite(low))
  np.testing.assert_allclose(low, high, atol=0.05 * np.abs(high).max())

  variables = {'params': variables['params'], **stats}
  # Each example's eval logits do not depend on the rest of the batch...
  full = model.apply(variables, images, train=False)
  np.testing.assert_allclose(full[:2],
                             model.apply(variables, images[:2], train=False),
                             atol=1e-5)
  # ...but do depend on the running statistics.
  shifted = {**variables, **jax.tree.map(lambda s: s + 1.0, stats)}
  assert not np.allclose(full, model.apply(shifted, images, train=False))


def test_small_resnet_projects_only_where_the_shape_changes():
  params = params_lib.param_shapes(SmallResNet(), 32)
  # A stem that downsamples has the same parameters.
  assert params_lib.param_shapes(SmallResNet(stem_stride=2, stem_pool=True),
                                 32) == params
  projected = sorted(name for name, block in params.items()
                     if 'shortcut_conv' in block)
  assert projected == ['stage2_block1', 'stage3_block1']
  flat = helpers.flat(params)
  assert flat['stage3_block1/shortcut_conv/kernel'].shape == (1, 1, 32, 64)
  assert not any(k.endswith('conv_0/bias') for k in flat)


STEM_POOLED = functools.partial(SmallResNet, stem_stride=2, stem_pool=True)
# The (height, width, channels) each stage ends in, of 32x32 images.
STAGE_SHAPES = [(SimpleCNN, [(32, 32, 32), (16, 16, 64), (8, 8, 128)]),
                (SmallResNet, [(32, 32, 16), (16, 16, 32), (8, 8, 64)]),
                (STEM_POOLED, [(8, 8, 16), (4, 4, 32), (2, 2, 64)])]


@pytest.mark.parametrize('model_class,shapes', STAGE_SHAPES)
def test_each_stage_sows_the_feature_map_it_ends_with(model_class, shapes):
  model = model_class(num_classes=7)
  variables = helpers.random_cnn_variables(model, helpers.images(4, 32, seed=0))
  _, out = model.apply(variables, helpers.images(4, 32, seed=1), train=False,
                       return_out=True)
  features = out['stages']
  assert [f.shape[1:] for f in features] == shapes
  assert model.feature_widths == tuple(shape[-1] for shape in shapes)
  assert all(np.min(f) >= 0 for f in features)  # after the ReLU
  # The last stage's map is what the head pools and reads.
  head = variables['params']['head']
  np.testing.assert_allclose(
      np.mean(features[-1], axis=(1, 2)) @ head['kernel'] + head['bias'],
      model.apply(variables, helpers.images(4, 32, seed=1), train=False),
      rtol=1e-5, atol=1e-5)

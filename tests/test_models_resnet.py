"""The hybrid's ResNet stem against the official tree and a NumPy reference."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.models import create_model
from vit_jax.models import resnet
from tests import helpers
from tests.test_formats_params import positions
from tests.test_models_vit import official_param_shapes

R50_STAGES = (3, 4, 9)
R50_STEM_PARAMS = 11_894_848
VIT_B16_PARAMS = 86_567_656  # tests/test_models_registry.py

# One stage of one unit: the stem's stride is 4, its features 256.
TINY_HYBRID = dict(resnet_stages=(1,), hidden_size=32, num_layers=1,
                   num_heads=2, mlp_dim=64)


def official_stem_shapes(stages):
  """Path -> shape of the official hybrid's stem: each convX, then a gnX."""
  convs = {'conv_root': (7, 7, 3, 64)}
  channels = 64
  for b, num_units in enumerate(stages):
    features = 64 * 2**b
    for u in range(num_units):
      unit = f'block{b + 1}/unit{u + 1}/'
      if u == 0:  # The first unit changes the channels or the stride.
        convs[unit + 'conv_proj'] = (1, 1, channels, 4 * features)
      convs[unit + 'conv1'] = (1, 1, channels, features)
      convs[unit + 'conv2'] = (3, 3, features, features)
      convs[unit + 'conv3'] = (1, 1, features, 4 * features)
      channels = 4 * features
  shapes = {}
  for conv, shape in convs.items():
    norm = conv.replace('conv', 'gn')
    shapes[f'{conv}/kernel'] = shape
    shapes |= dict.fromkeys((f'{norm}/scale', f'{norm}/bias'), shape[-1:])
  return shapes


def _numpy_standardize(kernel, eps=1e-5):
  k = np.asarray(kernel, np.float64)
  k = k - k.mean(axis=(0, 1, 2), keepdims=True)
  return k / (k.std(axis=(0, 1, 2), keepdims=True) + eps)


def _conv(x, kernel, stride):
  """'SAME' conv of NHWC x with an HWIO kernel, in float32 as the model's."""
  return np.asarray(
      jax.lax.conv_general_dilated(np.float32(x), np.float32(kernel),
                                   (stride, stride), 'SAME',
                                   dimension_numbers=('NHWC', 'HWIO', 'NHWC')),
      np.float64)


def _numpy_group_norm(x, p, groups=32, eps=1e-6):
  n, h, w, c = x.shape
  g = x.reshape(n, h, w, groups, c // groups)
  mean = g.mean(axis=(1, 2, 4), keepdims=True)
  g = (g - mean) / np.sqrt(g.var(axis=(1, 2, 4), keepdims=True) + eps)
  return g.reshape(x.shape) * p['scale'] + p['bias']


def reference_stem(params, images):
  """The official stem in float64 NumPy, but for convolutions and the pool."""
  p = jax.tree.map(lambda a: np.asarray(a, np.float64), params)

  def conv_norm(x, q, name, stride=1):  # q's conv{name}, then its gn{name}
    y = _conv(x, _numpy_standardize(q[f'conv{name}']['kernel']), stride)
    return _numpy_group_norm(y, q[f'gn{name}'])

  x = np.maximum(conv_norm(images, p, '_root', 2), 0)
  x = np.asarray(nn.max_pool(np.float32(x), (3, 3), (2, 2), 'SAME'), np.float64)
  for b in range(1, len(p) - 1):  # after conv_root and gn_root, blocks 1...
    for u in range(1, len(p[f'block{b}']) + 1):
      q = p[f'block{b}'][f'unit{u}']
      stride = 2 if b > 1 and u == 1 else 1
      shortcut = conv_norm(x, q, '_proj', stride) if 'conv_proj' in q else x
      y = np.maximum(conv_norm(x, q, '1'), 0)
      y = np.maximum(conv_norm(y, q, '2', stride), 0)
      x = np.maximum(shortcut + conv_norm(y, q, '3'), 0)
  return x


def _shapes(model, size):
  return helpers.param_shapes(model, jnp.zeros((1, size, size, 3)))


def test_std_conv_is_flax_conv_with_the_standardized_kernel():
  # Each kernel size and stride of the stem: test_stem_forward_matches_reference.
  kernel_size, strides = 3, 2
  x = helpers.normal((2, 9, 9, 5), 1)
  ours = resnet.StdConv(6, kernel_size, strides)
  flax_conv = nn.Conv(6, (kernel_size, kernel_size), (strides, strides),
                      use_bias=False)
  # One program each, not one per operation.
  params = jax.jit(ours.init)(jax.random.key(2), x)
  # The same parameter and initial value as the official StdConv(nn.Conv).
  jax.tree.map(np.testing.assert_array_equal, params,
               jax.jit(flax_conv.init)(jax.random.key(2), x))

  kernel = params['params']['kernel'] * 3 + 0.5
  expected = jax.jit(flax_conv.apply)(
      {'params': {'kernel': _numpy_standardize(kernel).astype(np.float32)}}, x)
  got = jax.jit(ours.apply)({'params': {'kernel': kernel}}, x)
  np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_group_norm_defaults_are_flax_defaults_as_in_the_official_code():
  default = nn.GroupNorm()
  assert (resnet.GROUP_NORM_GROUPS,
          resnet.GROUP_NORM_EPSILON) == (default.num_groups, default.epsilon)


class Stem(nn.Module):
  """`resnet.resnet_stem` as a module of its own, to test it alone."""

  stages: tuple[int, ...]

  @nn.compact
  def __call__(self, images):
    return resnet.resnet_stem(images, self.stages)


# Stages, and the stem's stride and features.
STEMS = [((), 4, 64), ((3,), 4, 256), ((2, 2), 8, 512), ((3, 4, 9), 16, 1024),
         ((3, 4, 6, 3), 32, 2048)]


@pytest.mark.parametrize('stages,stride,features', STEMS)
def test_stem_stride_and_features(stages, stride, features):
  size = 2 * stride
  out = jax.eval_shape(lambda: Stem(stages).init_with_output(
      jax.random.key(0), jnp.zeros((1, size, size, 3))))[0]
  assert out.shape == (1, 2, 2, features)
  assert resnet.stem_stride(stages) == stride


def test_hybrid_config_tree_and_count_follow_the_official_model():
  model = create_model('R50+ViT-B_16', 1000)
  expected = dict(resnet_stages=(3, 4, 9), resnet_width_factor=1, patch_size=1,
                  hidden_size=768, num_layers=12, num_heads=12, mlp_dim=3072,
                  dropout_rate=0.1, attention_dropout_rate=0.0,
                  representation_size=None, classifier='token')
  assert {field: getattr(model, field) for field in expected} == expected
  assert model.effective_patch_size == 16
  shapes = _shapes(model, 224)
  official = official_param_shapes(patch=1, hidden=768, layers=12, heads=12,
                                   mlp=3072, tokens=197, num_classes=1000)
  official['embedding/kernel'] = (1, 1, 1024, 768)  # 1x1 on the feature map.
  stem = official_stem_shapes(R50_STAGES)
  assert shapes == official | stem
  assert sum(np.prod(shape) for shape in stem.values()) == R50_STEM_PARAMS
  count = sum(np.prod(shape) for shape in shapes.values())  # the registry's
  # ViT-B_16, with the stem and a 1x1x1024 instead of 16x16x3 embedding.
  assert count == (VIT_B16_PARAMS + R50_STEM_PARAMS - 16 * 16 * 3 * 768 +
                   1024 * 768)


def test_stem_forward_matches_reference():
  stem, images = Stem((1, 2)), helpers.normal((2, 32, 32, 3), 3)
  params = helpers.random_params(stem, images)
  got = jax.jit(stem.apply)({'params': params}, images)
  expected = reference_stem(params, images)
  assert got.shape == expected.shape == (2, 4, 4, 512)
  np.testing.assert_allclose(got, expected, rtol=1e-4,
                             atol=1e-4 * np.abs(expected).max())


def test_last_group_norm_starts_at_zero_so_units_start_as_shortcuts():
  x, unit = helpers.normal((1, 4, 4, 128), 0), resnet.ResidualUnit(32)
  y, variables = jax.jit(unit.init_with_output)(jax.random.key(0), x)
  params = variables['params']
  assert not np.any(params['gn3']['scale']) and 'conv_proj' not in params
  np.testing.assert_array_equal(params['gn1']['scale'], 1)
  np.testing.assert_allclose(y, np.maximum(x, 0), atol=1e-6)


def test_tiny_hybrid_forward_pass():
  model = create_model('R50+ViT-B_16', 10, **TINY_HYBRID)
  images = helpers.normal((2, 8, 8, 3), 0)
  params = helpers.random_params(model, images, train=False)
  # 8x8 -> a 2x2 feature map -> 4 tokens and [CLS].
  assert positions(params).shape == (1, 5, 32)
  assert params['embedding']['kernel'].shape == (1, 1, 256, 32)
  # jit: one compilation instead of one per operation.
  logits = helpers.compiled(model.apply, {'params': params}, images,
                            train=False)
  assert logits.shape == (2, 10) and logits.dtype == jnp.float32
  assert np.all(np.isfinite(logits)) and not np.allclose(logits[0], logits[1])

  low = create_model('R50+ViT-B_16', 10, dtype=jnp.bfloat16, **TINY_HYBRID)
  low = helpers.compiled(low.apply, {'params': params}, images, train=False)
  assert low.dtype == jnp.float32
  np.testing.assert_allclose(low, logits, atol=0.05 * np.abs(logits).max())


def test_invalid_stems_and_image_sizes_are_clear_errors():
  model = create_model('R50+ViT-B_16', 10)
  with pytest.raises(
      ValueError, match='200x200 is not divisible by 16, the '
      "ResNet stem's stride 16 times the patch size 1"):
    _shapes(model, 200)
  model = create_model('R50+ViT-B_16', 10, patch_size=2, num_layers=1)
  with pytest.raises(ValueError, match='not divisible by 32'):
    _shapes(model, 240)
  assert _shapes(model, 256)['embedding/kernel'] == (2, 2, 1024, 768)
  with pytest.raises(ValueError, match='at least one unit'):
    create_model('R50+ViT-B_16', 10, resnet_stages=(3, 0))
  with pytest.raises(ValueError, match='width_factor=0'):
    create_model('R50+ViT-B_16', 10, resnet_width_factor=0)

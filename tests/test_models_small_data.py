"""The ViT's options for training on little data, each against a reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from vit_jax.models import VisionTransformer
from vit_jax.models import for_inference
from vit_jax.models import vit
from vit_jax.models.small_data import DropPath
from vit_jax.models.small_data import drop_path_rates
from vit_jax.models.small_data import mimetic_kernels
from vit_jax.models.small_data import posemb_sincos_2d
from vit_jax.models.small_data import shifted_patch_tokens
from tests.test_models_vit import SMALL
from tests.test_models_vit import _flat
from tests.test_models_vit import _images
from tests.test_models_vit import _randomized
from tests.test_models_vit import official_param_shapes


TECHNIQUES_OFF = dict(posemb='learned', stochastic_depth_rate=0.0,
                      shifted_patches=False, locality_attention=False,
                      mimetic_init=False, distillation_token=False,
                      guided_blocks=(), guidance_widths=(), mae_mask_ratio=0.0)


def _shapes(model, images):
  variables = jax.eval_shape(
      lambda: model.init(jax.random.key(0), images, train=False))
  assert set(variables) - {vit.TRAINING_OUTPUTS} == {'params'}
  return {k: v.shape for k, v in _flat(variables['params']).items()}


def test_techniques_are_off_by_default_and_leave_the_official_tree():
  model = VisionTransformer(num_classes=5, **SMALL)
  assert {f: getattr(model, f) for f in TECHNIQUES_OFF} == TECHNIQUES_OFF
  assert model.classifier == 'token'
  explicit = VisionTransformer(num_classes=5, **SMALL, **TECHNIQUES_OFF)
  official = official_param_shapes(patch=4, hidden=32, layers=2, heads=4,
                                   mlp=64, tokens=17, num_classes=5)
  assert _shapes(model, _images()) == _shapes(explicit, _images()) == official


def _permute_patches(images, patch, permutation):
  """The image with its patch grid's patches moved: patch permutation[i] of
  the row-major grid goes to place i."""
  b, h, w, c = images.shape
  rows, cols = h // patch, w // patch
  x = images.reshape(b, rows, patch, cols, patch, c).transpose(0, 1, 3, 2, 4, 5)
  x = x.reshape(b, rows * cols, patch, patch, c)[:, permutation]
  x = x.reshape(b, rows, cols, patch, patch, c).transpose(0, 1, 3, 2, 4, 5)
  return x.reshape(b, h, w, c)


@pytest.mark.parametrize('posemb,classifier', [('none', 'gap'),
                                               ('none', 'map'),
                                               ('learned', 'gap')])
def test_only_a_position_embedding_makes_patch_order_matter(posemb,
                                                            classifier):
  # The property: without position information a pooling head sees a
  # set of patches, so permuting them changes nothing; the (random, nonzero)
  # learned embedding ties each patch to its place.
  model = VisionTransformer(num_classes=5, posemb=posemb,
                            classifier=classifier, **SMALL)
  images = _images()
  params = _randomized(model.init(jax.random.key(0), images,
                                  train=False)['params'])
  permutation = np.random.default_rng(0).permutation(16)
  assert np.any(permutation != np.arange(16))
  permuted = _permute_patches(images, 4, permutation)
  assert not np.allclose(permuted, images)
  np.testing.assert_array_equal(  # The helper moves patches, nothing else.
      np.sort(np.asarray(permuted).ravel()), np.sort(np.asarray(images).ravel()))
  logits, permuted_logits = (model.apply({'params': params}, x, train=False)
                             for x in (images, permuted))
  invariant = np.allclose(permuted_logits, logits, rtol=1e-5, atol=1e-5)
  assert invariant == (posemb == 'none')
  if posemb == 'none':
    assert 'posembed_input' not in params['Transformer']


def test_sincos2d_posemb_matches_a_numpy_reference():
  # 2x2 grid, width 8: two frequencies, 1 and 1 / 10000.
  omega = np.array([1.0, 1e-4])
  rows = []
  for y in range(2):
    for x in range(2):
      rows.append(np.concatenate([np.sin(x * omega), np.cos(x * omega),
                                  np.sin(y * omega), np.cos(y * omega)]))
  np.testing.assert_allclose(posemb_sincos_2d(2, 2, 8), np.array(rows)[None],
                             rtol=1e-6, atol=1e-7)


def test_sincos2d_model_has_no_posemb_parameter_and_zero_for_cls():
  images = _images()
  sincos = VisionTransformer(num_classes=5, posemb='sincos2d', **SMALL)
  learned = VisionTransformer(num_classes=5, **SMALL)
  params = _randomized(learned.init(jax.random.key(0), images,
                                    train=False)['params'])
  transformer = dict(params['Transformer'])
  del transformer['posembed_input']
  sincos_params = {**params, 'Transformer': transformer}
  assert _shapes(sincos, images) == {
      k: v.shape for k, v in _flat(sincos_params).items()}
  # The same as the learned embedding set to [0 for cls; sincos of 4x4].
  fixed = jnp.concatenate([jnp.zeros((1, 1, 32)), posemb_sincos_2d(4, 4, 32)],
                          axis=1)
  transformer = {**transformer, 'posembed_input': {'pos_embedding': fixed}}
  np.testing.assert_allclose(
      sincos.apply({'params': sincos_params}, images, train=False),
      learned.apply({'params': {**params, 'Transformer': transformer}},
                    images, train=False), rtol=1e-6, atol=1e-6)


def test_posemb_choices_are_checked():
  with pytest.raises(ValueError, match="posemb='sincos2d' needs a hidden_size "
                     'divisible by 4, got 30'):
    VisionTransformer(num_classes=5, posemb='sincos2d',
                      **{**SMALL, 'hidden_size': 30, 'num_heads': 3})
  with pytest.raises(ValueError, match="posemb='learn'; use one of"):
    VisionTransformer(num_classes=5, posemb='learn', **SMALL)


def test_map_head_pools_with_a_probe_and_no_cls_token():
  model = VisionTransformer(num_classes=7, classifier='map', **SMALL)
  logits, variables = model.init_with_output(
      jax.random.key(0), _images(batch=3), train=False)
  assert logits.shape == (3, 7)
  shapes = {k: v.shape for k, v in _flat(variables['params']).items()}
  assert 'cls' not in shapes
  assert shapes['Transformer/posembed_input/pos_embedding'] == (1, 16, 32)
  head = {k[len('MAPHead_0/'):]: v for k, v in shapes.items()
          if k.startswith('MAPHead_0/')}
  attention = 'MultiHeadDotProductAttention_0'
  assert head == {
      'probe': (1, 1, 32),
      **{f'{attention}/{p}/kernel': (32, 4, 8)
         for p in ('query', 'key', 'value')},
      **{f'{attention}/{p}/bias': (4, 8) for p in ('query', 'key', 'value')},
      f'{attention}/out/kernel': (4, 8, 32), f'{attention}/out/bias': (32,),
      'LayerNorm_0/scale': (32,), 'LayerNorm_0/bias': (32,),
      'MlpBlock_0/Dense_0/kernel': (32, 64), 'MlpBlock_0/Dense_0/bias': (64,),
      'MlpBlock_0/Dense_1/kernel': (64, 32), 'MlpBlock_0/Dense_1/bias': (32,),
  }


def test_drop_path_drops_whole_examples():
  x = jnp.ones((256, 3, 4))
  y = np.asarray(DropPath(0.5).apply({}, x, deterministic=False,
                                     rngs={'dropout': jax.random.key(0)}))
  per_example = y.reshape(256, -1)
  assert np.all(per_example == per_example[:, :1])  # All of it, or none.
  assert set(np.unique(per_example)) == {0.0, 2.0}
  assert 0.35 < np.mean(per_example[:, 0] == 0) < 0.65
  np.testing.assert_array_equal(
      DropPath(0.5).apply({}, x, deterministic=True), x)
  assert drop_path_rates(0.3, 4) == pytest.approx([0.0, 0.1, 0.2, 0.3])
  assert drop_path_rates(0.3, 1) == [0.0]


def test_stochastic_depth_is_train_only_and_adds_no_parameters():
  images = _images(batch=8)
  plain = VisionTransformer(num_classes=5, **SMALL)
  deep = VisionTransformer(num_classes=5, stochastic_depth_rate=0.99,
                           **SMALL)
  assert _shapes(deep, images) == _shapes(plain, images)
  params = {'params': _randomized(
      plain.init(jax.random.key(0), images, train=False)['params'])}
  evaluated = plain.apply(params, images, train=False)

  def run(train, seed):
    return deep.apply(params, images, train=train,
                      rngs={'dropout': jax.random.key(seed)})

  np.testing.assert_array_equal(run(False, 1), evaluated)
  # The last block's branches are dropped, or kept and scaled by 100, so no
  # example comes out as in eval.
  same = np.all(np.isclose(run(True, 1), evaluated, rtol=1e-5, atol=1e-5),
                axis=-1)
  assert not np.any(same)
  with pytest.raises(ValueError, match='stochastic_depth_rate=1.0 must be in'):
    VisionTransformer(num_classes=5, stochastic_depth_rate=1.0, **SMALL)


def _shifted(x, dy, dx):
  """x moved by (dy, dx) pixels, zeros shifted in: out[i, j] = x[i-dy, j-dx]."""
  out = np.zeros_like(x)
  h, w = x.shape[1:3]
  for i in range(h):
    for j in range(w):
      if 0 <= i - dy < h and 0 <= j - dx < w:
        out[:, i, j] = x[:, i - dy, j - dx]
  return out


@pytest.mark.parametrize('patch', [2, 3])
def test_shifted_patch_tokens_match_a_numpy_reference(patch):
  images = np.asarray(_images(batch=1, size=2 * patch))
  s = patch // 2
  # The image, then its copies moved up-left, up-right, down-left, down-right.
  stacked = np.concatenate(
      [images] + [_shifted(images, dy, dx)
                  for dy, dx in ((-s, -s), (-s, s), (s, -s), (s, s))], axis=-1)
  expected = np.stack([
      np.stack([stacked[0, r * patch:(r + 1) * patch,
                        c * patch:(c + 1) * patch].ravel() for c in range(2)])
      for r in range(2)
  ])[None]
  np.testing.assert_array_equal(shifted_patch_tokens(images, patch), expected)


def test_shifted_patches_replace_the_embedding_conv():
  model = VisionTransformer(num_classes=7, shifted_patches=True, **SMALL)
  logits, variables = model.init_with_output(
      jax.random.key(0), _images(batch=3), train=False)
  assert logits.shape == (3, 7)
  shapes = {k: v.shape for k, v in _flat(variables['params']).items()}
  features = 4 * 4 * 3 * 5
  assert 'embedding/kernel' not in shapes
  assert {k: v for k, v in shapes.items() if k.startswith('shifted')} == {
      'shifted_patch_norm/scale': (features,),
      'shifted_patch_norm/bias': (features,),
      'shifted_patch_embedding/kernel': (features, 32),
      'shifted_patch_embedding/bias': (32,),
  }
  with pytest.raises(ValueError, match='cannot follow a ResNet stem'):
    VisionTransformer(num_classes=5, shifted_patches=True,
                      resnet_stages=(1,), **{**SMALL, 'patch_size': 2})
  with pytest.raises(ValueError, match='patch_size=1 cannot give'):
    VisionTransformer(num_classes=5, shifted_patches=True,
                      **{**SMALL, 'patch_size': 1})


def _off_diagonal(matrix):
  return matrix[~np.eye(len(matrix), dtype=bool)]


def test_mimetic_products_are_the_papers_with_one_head():
  """One head of the full width: W_q W_k^T = 0.7 Z + 0.7 I and W_v W_proj
  = 0.4 Z - 0.4 I exactly, Z of N(0, 1/d) entries (Trockman & Kolter,
  section 3)."""
  d = 256
  kernels = mimetic_kernels(jax.random.key(1), d, heads=1)
  query_key = np.asarray(kernels['query'][:, 0] @ kernels['key'][:, 0].T,
                         np.float64)
  value_out = np.asarray(kernels['value'].reshape(d, d) @
                         kernels['out'].reshape(d, d), np.float64)
  for product, (noise, identity) in ((query_key, (0.7, 0.7)),
                                     (value_out, (0.4, -0.4))):
    z = (product - identity * np.eye(d)) / noise * np.sqrt(d)
    # Standard normal entries: mean 0, std 1 (65,536 of them).
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02
    assert abs(np.diag(product).mean() - identity) < 0.01


def test_mimetic_heads_are_each_the_best_rank_approximation():
  """Several heads: each head's W_q W_k^T is the best rank-head_dim
  approximation of 0.7 Z + 0.7 I of a Z of its own, so positive on the
  diagonal; W_v W_proj spans the heads and stays 0.4 Z - 0.4 I."""
  d, heads = 128, 4
  kernels = mimetic_kernels(jax.random.key(2), d, heads)
  assert kernels['query'].shape == kernels['key'].shape == (d, heads, 32)
  assert kernels['out'].shape == (heads, 32, d)
  products = [np.asarray(kernels['query'][:, h] @ kernels['key'][:, h].T)
              for h in range(heads)]
  for h, product in enumerate(products):
    assert np.linalg.matrix_rank(product) == 32
    # Its diagonal well above its off-diagonal noise.
    assert np.diag(product).mean() > 4 * _off_diagonal(product).std()
    # Balanced factors of a truncated SVD: W_q^T W_q = W_k^T W_k = the top
    # singular values on the diagonal, largest first.
    query, key = (np.asarray(kernels[n][:, h], np.float64)
                  for n in ('query', 'key'))
    gram = query.T @ query
    np.testing.assert_allclose(gram, key.T @ key, atol=1e-5)
    singular = np.diag(gram)
    np.testing.assert_allclose(gram, np.diag(singular), atol=1e-5)
    assert np.all(np.diff(singular) <= 1e-6)
    np.testing.assert_allclose(
        singular, np.linalg.svd(product, compute_uv=False)[:32], rtol=1e-4)
  assert not np.allclose(products[0], products[1])
  value_out = np.asarray(kernels['value'].reshape(d, d) @
                         kernels['out'].reshape(d, d))
  np.testing.assert_allclose(np.diag(value_out).mean(), -0.4, atol=0.01)


@pytest.mark.parametrize('scan', [False, pytest.param(True, marks=pytest.mark.slow)])  # 7 s
def test_mimetic_init_changes_only_the_attention_kernels(scan):
  """The official tree; the attention kernels of every block are mimetic
  (each block its own), everything else as without it."""
  images = _images()
  plain = VisionTransformer(num_classes=5, **SMALL, scan=scan)
  mimetic = plain.clone(mimetic_init=True)
  params = mimetic.init(jax.random.key(0), images, train=False)['params']
  before = _flat(plain.init(jax.random.key(0), images, train=False)['params'])
  after = _flat(params)
  assert {k: v.shape for k, v in before.items()} == {
      k: v.shape for k, v in after.items()}
  changed = {k for k in before if not np.array_equal(before[k], after[k])}
  attention = {k for k in before if 'MultiHeadDotProductAttention_0' in k
               and k.endswith('kernel')}
  assert changed == attention
  def kernel(name, layer):
    if scan:  # stacked: (layers, ...)
      return after[f'Transformer/encoderblock/MultiHeadDotProductAttention_0/'
                   f'{name}/kernel'][layer]
    return after[f'Transformer/encoderblock_{layer}/'
                 f'MultiHeadDotProductAttention_0/{name}/kernel']

  for layer in (0, 1):
    product = kernel('query', layer)[:, 0] @ kernel('key', layer)[:, 0].T
    # head_dim 8 of 32: a rank-8 approximation, its diagonal still clear.
    assert np.diag(product).mean() > 2 * _off_diagonal(product).std()
  assert not np.allclose(kernel('query', 0), kernel('query', 1))
  logits = mimetic.apply({'params': params}, images, train=False)
  assert np.isfinite(logits).all()


GUIDED = dict(num_classes=5, **{**SMALL, 'num_layers': 3},
              guided_blocks=(0, 2), guidance_widths=(6, 10))


def test_guidance_adds_only_its_projections_and_sows_the_blocks_maps():
  model = VisionTransformer(**GUIDED)
  images = _images()
  variables = _randomized(model.init(jax.random.key(0), images, train=False))
  shapes = _shapes(model, images)
  plain = _shapes(VisionTransformer(**{**GUIDED, 'guided_blocks': (),
                                       'guidance_widths': ()}), images)
  hidden = SMALL['hidden_size']
  assert shapes == {**plain,
                    'locality_guidance_0/kernel': (hidden, 6),
                    'locality_guidance_0/bias': (6,),
                    'locality_guidance_1/kernel': (hidden, 10),
                    'locality_guidance_1/bias': (10,)}

  logits, state = model.apply(variables, images, train=False,
                              capture_intermediates=True,
                              mutable=[vit.TRAINING_OUTPUTS, 'intermediates'])
  maps = state[vit.TRAINING_OUTPUTS]['guided_features']
  blocks = state['intermediates']['Transformer']
  grid = images.shape[1] // SMALL['patch_size']
  for k, block in enumerate((0, 2)):
    tokens = blocks[f'encoderblock_{block}']['__call__'][0][:, 1:]  # no [CLS]
    projection = variables['params'][f'locality_guidance_{k}']
    expected = (tokens @ projection['kernel'] + projection['bias']).reshape(
        images.shape[0], grid, grid, -1)
    np.testing.assert_allclose(maps[k], expected, rtol=1e-5, atol=1e-6)

  # Without the projections (what evaluation, export and fine-tuning get)
  # the same logits.
  pure_model, pure = for_inference(model, variables)
  assert pure_model.guided_blocks == ()
  assert set(_flat(pure['params'])) == set(plain)
  np.testing.assert_array_equal(
      pure_model.apply(pure, images, train=False), logits)


@pytest.mark.parametrize('fields,message', [
    (dict(guided_blocks=(0, 2), guidance_widths=(6,)), 'same length'),
    (dict(guided_blocks=(2, 0), guidance_widths=(6, 6)), 'increasing order'),
    (dict(guided_blocks=(0, 3), guidance_widths=(6, 6)), r'each in 0\.\.2'),
    (dict(guided_blocks=(0,), guidance_widths=(0,)), 'must be positive'),
    (dict(scan=True), 'set scan=False'),
])
def test_guidance_fields_are_checked_in_one_line(fields, message):
  with pytest.raises(ValueError, match=message):
    VisionTransformer(**{**GUIDED, **fields})

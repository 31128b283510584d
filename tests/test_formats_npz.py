"""Released .npz files read and written back, and their errors."""

import functools
import re

import flax
import jax
import numpy as np
import pytest

from tests import helpers
from tests.test_models_vit import official_param_shapes
from vit_jax import models
from vit_jax.checkpoints import reading
from vit_jax.errors import CheckpointError
from vit_jax.formats import npz
from vit_jax.formats import params as params_lib

# A 2-layer ViT at 32x32: 4x4 patches of 8 pixels and the class token.
TINY_VIT = dict(num_layers=2, hidden_size=16, num_heads=2, mlp_dim=32,
                patch_size=8)
TINY_IMAGE = 32


def tiny_vit(**overrides):
  return models.create_model('ViT-Ti_16', 10, **{**TINY_VIT, **overrides})


def check_fits_tiny_vit(params, **overrides):
  params_lib.check_params(
      params, params_lib.param_shapes(tiny_vit(**overrides), TINY_IMAGE))


# The released files number block submodules across types, linen per type.
LINEN_NUMBERS = (('MultiHeadDotProductAttention_1',
                  'MultiHeadDotProductAttention_0'),
                 ('LayerNorm_2', 'LayerNorm_1'), ('MlpBlock_3', 'MlpBlock_0'))


def released_arrays(seed=0, representation_size=None):
  """Random arrays for `tiny_vit`, named as in the released files."""
  shapes = official_param_shapes(patch=8, hidden=16, layers=2, heads=2, mlp=32,
                                 tokens=17, num_classes=10,
                                 representation_size=representation_size)
  rng = np.random.default_rng(seed)
  return {
      functools.reduce(lambda k, n: k.replace(n[1], n[0]), LINEN_NUMBERS, key):
          (0.1 * rng.standard_normal(shape)).astype(np.float32)
      for key, shape in shapes.items()
  }


def write_npz(path, arrays):
  np.savez(path, **arrays)
  return path


def linen_numbered(arrays):
  return {
      functools.reduce(lambda k, n: k.replace(*n), LINEN_NUMBERS, key): value
      for key, value in arrays.items()
  }


def assert_trees_identical(actual, expected):
  assert jax.tree.structure(actual) == jax.tree.structure(expected)
  for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
    a, e = np.asarray(a), np.asarray(e)
    assert (a.dtype, a.shape, a.tobytes()) == (e.dtype, e.shape, e.tobytes())


def assert_npz_identical(actual_path, expected_path):
  with np.load(actual_path) as actual, np.load(expected_path) as expected:
    assert_trees_identical(dict(actual), dict(expected))


def test_released_npz_loads_into_our_tree_and_drives_the_model(tmp_path):
  arrays = released_arrays()
  path = write_npz(tmp_path / 'tiny.npz', arrays)
  params = npz.load_npz(path)
  # Our tree, renamed by hand rather than by npz.
  by_hand = flax.traverse_util.unflatten_dict(linen_numbered(arrays), sep='/')
  check_fits_tiny_vit(params)
  assert_trees_identical(params, by_hand)
  images = helpers.images(size=TINY_IMAGE)
  logits = tiny_vit().apply({'params': params}, images, train=False)
  assert logits.shape == (2, 10) and np.all(np.isfinite(logits))
  assert_trees_identical(reading.load_params(path), params)
  # A scanned model takes the blocks stacked; saved back, they are the
  # official layout and names, array for array.
  stacked = params_lib.stack_blocks(params)
  check_fits_tiny_vit(stacked, scan=True)
  np.testing.assert_allclose(
      tiny_vit(scan=True).apply({'params': stacked}, images, train=False),
      logits, rtol=1e-5, atol=1e-5)
  npz.save_npz(stacked, tmp_path / 'saved.npz')
  assert_npz_identical(tmp_path / 'saved.npz', path)


def test_params_to_file_to_params_is_identical_in_the_released_names(tmp_path):
  params = helpers.random_vit_params(tiny_vit(), TINY_IMAGE)
  path = tmp_path / 'sub' / 'params.npz'
  npz.save_npz(params, path)
  with np.load(path) as saved:
    assert set(saved.files) == set(released_arrays())
  assert_trees_identical(npz.load_npz(path), params)
  # What it cannot write back it refuses, writing nothing.
  with pytest.raises(CheckpointError, match=r"variables\['params'\]"):
    npz.save_npz({'params': params}, path.parent / 'variables.npz')
  params['cls'] = params['cls'].astype(jax.numpy.bfloat16)
  with pytest.raises(CheckpointError,
                     match='cls is bfloat16.*cast it to float32'):
    npz.save_npz(params, path.parent / 'bf16.npz')
  assert [p.name for p in path.parent.iterdir()] == ['params.npz']


def test_pre_logits_load_and_a_mismatch_names_the_key_and_shapes(tmp_path):
  arrays = released_arrays(representation_size=12)
  path = write_npz(tmp_path / 'pre_logits.npz', arrays)
  params = npz.load_npz(path)
  check_fits_tiny_vit(params, representation_size=12)
  npz.save_npz(params, tmp_path / 'saved.npz')
  assert_npz_identical(tmp_path / 'saved.npz', path)
  # Read as a model, the shapes say it has the layer (timm and hf have none:
  # tests/test_formats.py).
  assert reading.load(path).model.representation_size == 12
  # Without a representation layer the model has no place for it.
  with pytest.raises(CheckpointError) as error:
    check_fits_tiny_vit(params)
  said = str(error.value)
  assert ('pre_logits/kernel (shape (16, 12)) is in the checkpoint but not '
          'in the model') in said
  assert 'head/kernel has shape (12, 10) in the checkpoint but (16, 10)' in said
  arrays = released_arrays()
  del arrays['Transformer/encoderblock_1/MlpBlock_3/Dense_1/bias']
  params = npz.load_npz(write_npz(tmp_path / 'missing.npz', arrays))
  with pytest.raises(
      CheckpointError, match=re.escape(
          'Transformer/encoderblock_1/MlpBlock_0/Dense_1/bias is missing from '
          'the checkpoint but the model has it with shape (16,).')):
    check_fits_tiny_vit(params)
  # A shallower model: all 15 remaining arrays of block 1 are unexpected.
  with pytest.raises(
      CheckpointError, match=r'\(15 problems\):\n  Transformer/encoderblock_1/'
      r'LayerNorm_0/scale \(shape \(16,\)\) is in the checkpoint '
      r'but not in the model\n(.|\n)*\.\.\. and 3 more$'):
    check_fits_tiny_vit(params, num_layers=1)


def test_file_to_params_to_file_is_identical_from_either_numbering(tmp_path):
  arrays = released_arrays()
  # Dtypes other than float32 must survive too.
  arrays['cls'] = arrays['cls'].astype(np.float16)
  arrays['head/bias'] = arrays['head/bias'].astype(np.float64)
  released = npz.load_npz(write_npz(tmp_path / 'released.npz', arrays))
  npz.save_npz(released, tmp_path / 'saved.npz')
  assert_npz_identical(tmp_path / 'saved.npz', tmp_path / 'released.npz')
  # linen's numbering loads the same (and so saves back in the released one).
  linen = npz.load_npz(write_npz(tmp_path / 'linen.npz',
                                 linen_numbered(arrays)))
  assert_trees_identical(linen, released)
  # Both numberings in one block leave it unclear which array is meant.
  mixed = released_arrays()
  mixed['Transformer/encoderblock_0/LayerNorm_1/scale'] = mixed[
      'Transformer/encoderblock_0/LayerNorm_2/scale']
  with pytest.raises(
      CheckpointError,
      match='LayerNorm_2/scale and .*LayerNorm_1/scale are the same parameter'):
    npz.load_npz(write_npz(tmp_path / 'mixed.npz', mixed))


def test_what_is_not_a_checkpoint_is_a_clear_error(tmp_path):

  def fails(path, match):
    with pytest.raises(CheckpointError, match=match) as error:
      reading.load_params(path)
    assert str(path) in str(error.value)

  # A missing one: test_runtime_command.
  (tmp_path / 'text.npz').write_text('not a zip')
  fails(tmp_path / 'text.npz', r'is not a .npz file \(a zip archive')
  whole = write_npz(tmp_path / 'tiny.npz', released_arrays()).read_bytes()
  (tmp_path / 'cut.npz').write_bytes(whole[:len(whole) // 2])
  fails(tmp_path / 'cut.npz', 'is empty or cut short .*: fetch it again')
  np.save(tmp_path / 'one.npy', np.zeros(3))
  fails(tmp_path / 'one.npy', 'is a single .npy array')
  fails(
      write_npz(tmp_path / 'other.npz', {'x': np.zeros(3)}),
      'is not a ViT checkpoint in the official .npz layout: it has no '
      'embedding/kernel, .*It has x.')
  bf16 = released_arrays() | {'cls': np.zeros((1, 1, 16), jax.numpy.bfloat16)}
  fails(write_npz(tmp_path / 'bf16.npz', bf16), r'cls as \|V2 .*float32\.$')
  broken = released_arrays()
  del broken['Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel']
  with pytest.raises(CheckpointError, match='Dense_0/kernel is missing'):
    reading.load(write_npz(tmp_path / 'broken.npz', broken))
  # Never numpy's advice to load it with allow_pickle, which runs its code.
  fails(
      write_npz(tmp_path / 'pickled.npz', {'x': np.array([{}], dtype=object)}),
      r'is not a readable .npz file: it holds pickled Python objects, which '
      r'are not loaded: they can run code\.$')
  with pytest.raises(CheckpointError, match='step=1 only'):
    reading.load_params(tmp_path / 'tiny.npz', step=1)

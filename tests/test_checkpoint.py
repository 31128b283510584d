"""Run checkpoints saved, restored and skipped when damaged; reading runs
back on any device count; released .npz files both ways."""

import functools
import json
import os
import re
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests.conftest import ROOT
from vit_jax import checkpoint
from vit_jax import models
from vit_jax import parallel
from vit_jax import steps


def test_loads_a_run_trained_on_other_devices_onto_one(trained_vit_run):
  workdir, _ = trained_vit_run
  run = checkpoint.load_run(workdir)
  assert run.step == 6
  assert run.config.image_size == 24
  assert run.config.model_overrides.num_layers == 2
  assert run.batch_stats == {}
  assert set(run.variables) == {'params'}
  leaves = jax.tree.leaves(run.params)
  assert {leaf.sharding.device_set.pop() for leaf in leaves} == {
      jax.devices()[0]}
  # The restored parameters drive the model they were trained as.
  model = models.from_config(run.config, num_classes=10)
  logits = model.apply(run.variables, np.zeros((2, 24, 24, 3)), train=False)
  assert logits.shape == (2, 10)
  assert np.all(np.isfinite(logits))


def test_missing_run_or_step_is_a_clear_error(trained_vit_run, tmp_path):
  with pytest.raises(checkpoint.CheckpointError, match='has no config.json'):
    checkpoint.load_run(tmp_path)
  workdir, _ = trained_vit_run
  with pytest.raises(checkpoint.CheckpointError,
                     match=r'No checkpoint of step 7 .* there are \[6\]'):
    checkpoint.load_run(workdir, step=7)
  (tmp_path / 'config.json').write_text('{}')
  with pytest.raises(checkpoint.CheckpointError, match='holds no checkpoint'):
    checkpoint.load_run(tmp_path)


def _saved_steps(directory, steps_to_save):
  """RunCheckpoints of a tiny state at `steps_to_save`, the state at step s
  holding s everywhere; returns (checkpoints, shapes of state and sums)."""
  sharding = parallel.replicated(parallel.make_mesh())
  state = {'w': parallel.replicate(np.zeros((3, 4), np.float32), sharding)}
  sums = steps.zero_sums(sharding)
  checkpoints = checkpoint.RunCheckpoints(directory, keep=5)
  for step in steps_to_save:
    state = jax.tree.map(lambda a, s=step: a * 0 + s, state)
    checkpoints.save(step, state, sums, [{'step': step}],
                     {'epoch': 1, 'batch': step})
  checkpoints.close()
  shapes = jax.tree.map(
      lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding),
      (state, sums))
  return checkpoint.RunCheckpoints(directory, keep=5), shapes


def test_restores_everything_the_loop_saved(tmp_path):
  checkpoints, shapes = _saved_steps(tmp_path / 'checkpoints', [2, 4])
  restored = checkpoints.restore_latest(*shapes)
  assert restored.step == 4
  np.testing.assert_array_equal(restored.state['w'], np.full((3, 4), 4.0))
  assert restored.history == [{'step': 4}]
  assert restored.position == {'epoch': 1, 'batch': 4}
  assert set(restored.train_sums) == {'loss', 'correct', 'count'}
  assert checkpoint.RunCheckpoints(tmp_path / 'none', 2).restore_latest(
      *shapes) is None


def test_a_damaged_latest_checkpoint_is_skipped_for_the_one_before(
    tmp_path, caplog):
  checkpoints, shapes = _saved_steps(tmp_path / 'checkpoints', [2, 4])
  for path in (tmp_path / 'checkpoints' / '4').rglob('*'):
    if path.is_file():
      path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])
  restored = checkpoints.restore_latest(*shapes)
  assert restored.step == 2
  np.testing.assert_array_equal(restored.state['w'], np.full((3, 4), 2.0))
  assert any(f'Skipping checkpoint {tmp_path / "checkpoints" / "4"}' in m
             for m in caplog.messages)
  # Set aside, so that the resumed run saves step 4 again.
  assert (tmp_path / 'checkpoints' / '4.unrestorable').is_dir()
  checkpoints.save(4, restored.state, restored.train_sums, [], {})
  checkpoints.close()
  assert checkpoints.steps() == [2, 4]


def test_when_no_checkpoint_restores_the_error_says_what_to_do(tmp_path):
  checkpoints, shapes = _saved_steps(tmp_path / 'checkpoints', [2])
  shutil.rmtree(tmp_path / 'checkpoints' / '2' / 'state')
  with pytest.raises(checkpoint.CheckpointError,
                     match=r'None of the checkpoints .* \(steps 2\) can be '
                     'restored.*Move the directory away'):
    checkpoints.restore_latest(*shapes)


# A 2-layer ViT at 32x32: 4x4 patches of 8 pixels and the class token.
TINY_VIT = dict(num_layers=2, hidden_size=16, num_heads=2, mlp_dim=32,
                patch_size=8)
TINY_IMAGE = 32
TINY_TOKENS = 17


def tiny_vit(**overrides):
  return models.create_model('ViT-Ti_16', 10, **{**TINY_VIT, **overrides})


def released_arrays(seed=0, representation_size=None, numbering='released'):
  """Random arrays for `tiny_vit`, under the official release's key names.

  numbering='linen' gives the per-type numbering of big_vision-era exports.
  """
  rng = np.random.default_rng(seed)
  d, heads, mlp, patch = 16, 2, 32, 8
  names = {
      'released': ('MultiHeadDotProductAttention_1', 'LayerNorm_2',
                   'MlpBlock_3'),
      'linen': ('MultiHeadDotProductAttention_0', 'LayerNorm_1', 'MlpBlock_0'),
  }[numbering]
  shapes = {
      'cls': (1, 1, d),
      'embedding/bias': (d,),
      'embedding/kernel': (patch, patch, 3, d),
      'Transformer/encoder_norm/bias': (d,),
      'Transformer/encoder_norm/scale': (d,),
      'Transformer/posembed_input/pos_embedding': (1, TINY_TOKENS, d),
  }
  for i in range(2):
    block = f'Transformer/encoderblock_{i}/'
    attention, norm, mlp_block = (block + name + '/' for name in names)
    shapes.update({
        block + 'LayerNorm_0/bias': (d,),
        block + 'LayerNorm_0/scale': (d,),
        attention + 'key/bias': (heads, d // heads),
        attention + 'key/kernel': (d, heads, d // heads),
        attention + 'out/bias': (d,),
        attention + 'out/kernel': (heads, d // heads, d),
        attention + 'query/bias': (heads, d // heads),
        attention + 'query/kernel': (d, heads, d // heads),
        attention + 'value/bias': (heads, d // heads),
        attention + 'value/kernel': (d, heads, d // heads),
        norm + 'bias': (d,),
        norm + 'scale': (d,),
        mlp_block + 'Dense_0/bias': (mlp,),
        mlp_block + 'Dense_0/kernel': (d, mlp),
        mlp_block + 'Dense_1/bias': (d,),
        mlp_block + 'Dense_1/kernel': (mlp, d),
    })
  head_in = d
  if representation_size is not None:
    shapes['pre_logits/bias'] = (representation_size,)
    shapes['pre_logits/kernel'] = (d, representation_size)
    head_in = representation_size
  shapes['head/bias'] = (10,)
  shapes['head/kernel'] = (head_in, 10)
  return {key: (0.1 * rng.standard_normal(shape)).astype(np.float32)
          for key, shape in shapes.items()}


def write_npz(path, arrays):
  np.savez(path, **arrays)
  return path


def placed_by_hand(arrays):
  """Our tree of `released_arrays()`, spelled out rather than renamed."""
  def dense(prefix):
    return {'kernel': arrays[prefix + '/kernel'],
            'bias': arrays[prefix + '/bias']}

  def norm(prefix):
    return {'scale': arrays[prefix + '/scale'],
            'bias': arrays[prefix + '/bias']}

  transformer = {
      'posembed_input': {
          'pos_embedding': arrays['Transformer/posembed_input/pos_embedding']},
      'encoder_norm': norm('Transformer/encoder_norm'),
  }
  for i in range(2):
    block = f'Transformer/encoderblock_{i}/'
    transformer[f'encoderblock_{i}'] = {
        'LayerNorm_0': norm(block + 'LayerNorm_0'),
        'MultiHeadDotProductAttention_0': {
            name: dense(block + 'MultiHeadDotProductAttention_1/' + name)
            for name in ('query', 'key', 'value', 'out')},
        'LayerNorm_1': norm(block + 'LayerNorm_2'),
        'MlpBlock_0': {'Dense_0': dense(block + 'MlpBlock_3/Dense_0'),
                       'Dense_1': dense(block + 'MlpBlock_3/Dense_1')},
    }
  return {'embedding': dense('embedding'), 'cls': arrays['cls'],
          'Transformer': transformer, 'head': dense('head')}


def assert_trees_identical(actual, expected):
  assert jax.tree.structure(actual) == jax.tree.structure(expected)
  for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
    a, e = np.asarray(a), np.asarray(e)
    assert (a.dtype, a.shape) == (e.dtype, e.shape)
    assert a.tobytes() == e.tobytes()


def assert_npz_identical(actual_path, expected_path):
  with np.load(actual_path) as actual, np.load(expected_path) as expected:
    assert sorted(actual.files) == sorted(expected.files)
    for key in expected.files:
      a, e = actual[key], expected[key]
      assert (a.dtype, a.shape) == (e.dtype, e.shape), key
      assert a.tobytes() == e.tobytes(), key


def test_released_npz_loads_into_our_tree_and_drives_the_model(tmp_path):
  arrays = released_arrays()
  path = write_npz(tmp_path / 'tiny.npz', arrays)
  params = checkpoint.load_npz(path)
  model = tiny_vit()
  expected = checkpoint.param_shapes(model, TINY_IMAGE)
  checkpoint.check_params(params, expected)
  assert jax.tree.structure(params) == jax.tree.structure(expected)
  assert_trees_identical(params, placed_by_hand(arrays))
  images = np.random.default_rng(1).standard_normal(
      (2, TINY_IMAGE, TINY_IMAGE, 3)).astype(np.float32)
  apply = jax.jit(functools.partial(model.apply, train=False))
  logits = apply({'params': params}, images)
  assert logits.shape == (2, 10)
  assert np.all(np.isfinite(logits))
  np.testing.assert_array_equal(
      logits, apply({'params': placed_by_hand(arrays)}, images))
  assert_trees_identical(checkpoint.load_params(path), params)


def test_file_to_params_to_file_is_identical(tmp_path):
  arrays = released_arrays()
  # Dtypes other than float32 must survive too.
  arrays['cls'] = arrays['cls'].astype(np.float16)
  arrays['head/bias'] = arrays['head/bias'].astype(np.float64)
  original = write_npz(tmp_path / 'original.npz', arrays)
  checkpoint.save_npz(checkpoint.load_npz(original), tmp_path / 'saved.npz')
  assert_npz_identical(tmp_path / 'saved.npz', original)


def test_params_to_file_to_params_is_identical_in_the_released_names(
    tmp_path):
  rng = np.random.default_rng(0)
  params = jax.tree.map(
      lambda leaf: rng.standard_normal(leaf.shape).astype(leaf.dtype),
      checkpoint.param_shapes(tiny_vit(), TINY_IMAGE))
  path = tmp_path / 'sub' / 'params.npz'
  checkpoint.save_npz(params, path)
  with np.load(path) as saved:
    assert set(saved.files) == set(released_arrays())
  assert_trees_identical(checkpoint.load_npz(path), params)
  assert [p.name for p in path.parent.iterdir()] == ['params.npz']


def test_representation_size_gives_pre_logits(tmp_path):
  arrays = released_arrays(representation_size=12)
  path = write_npz(tmp_path / 'pre_logits.npz', arrays)
  params = checkpoint.load_npz(path)
  assert set(params['pre_logits']) == {'kernel', 'bias'}
  model = tiny_vit(representation_size=12)
  checkpoint.check_params(params,
                          checkpoint.param_shapes(model, TINY_IMAGE))
  logits = model.apply({'params': params},
                       np.ones((1, TINY_IMAGE, TINY_IMAGE, 3)), train=False)
  assert np.all(np.isfinite(logits))
  checkpoint.save_npz(params, tmp_path / 'saved.npz')
  assert_npz_identical(tmp_path / 'saved.npz', path)
  # Without a representation layer the model has no place for it.
  with pytest.raises(checkpoint.CheckpointError) as error:
    checkpoint.check_params(params,
                            checkpoint.param_shapes(tiny_vit(), TINY_IMAGE))
  message = str(error.value)
  assert ('pre_logits/kernel (shape (16, 12)) is in the checkpoint but not '
          'in the model') in message
  assert 'head/kernel has shape (12, 10) in the checkpoint but (16, 10)' in (
      message)


def test_a_mismatch_names_the_key_and_both_shapes(tmp_path):
  arrays = released_arrays()
  params = checkpoint.load_npz(write_npz(tmp_path / 'tiny.npz', arrays))
  with pytest.raises(
      checkpoint.CheckpointError,
      match=re.escape(
          'Transformer/posembed_input/pos_embedding has shape (1, 17, 16) in '
          'tiny.npz but (1, 37, 16) in ViT-Ti_16 at 48x48.')):
    checkpoint.check_params(params, checkpoint.param_shapes(tiny_vit(), 48),
                            source='tiny.npz', target='ViT-Ti_16 at 48x48')
  del arrays['Transformer/encoderblock_1/MlpBlock_3/Dense_1/bias']
  params = checkpoint.load_npz(write_npz(tmp_path / 'missing.npz', arrays))
  with pytest.raises(
      checkpoint.CheckpointError,
      match=re.escape(
          'Transformer/encoderblock_1/MlpBlock_0/Dense_1/bias is missing from '
          'the checkpoint but the model has it with shape (16,).')):
    checkpoint.check_params(params,
                            checkpoint.param_shapes(tiny_vit(), TINY_IMAGE))
  # A shallower model: all 15 remaining arrays of block 1 are unexpected.
  with pytest.raises(checkpoint.CheckpointError,
                     match=r'\(15 problems\):\n  Transformer/encoderblock_1/'
                     r'LayerNorm_0/bias \(shape \(16,\)\) is in the checkpoint '
                     r'but not in the model\n(.|\n)*\.\.\. and 3 more$'):
    checkpoint.check_params(
        params, checkpoint.param_shapes(tiny_vit(num_layers=1), TINY_IMAGE))


def test_linen_numbering_loads_too(tmp_path):
  released = checkpoint.load_npz(
      write_npz(tmp_path / 'released.npz', released_arrays(seed=3)))
  linen = checkpoint.load_npz(
      write_npz(tmp_path / 'linen.npz',
                released_arrays(seed=3, numbering='linen')))
  assert_trees_identical(linen, released)
  # Saved back, it is in the released numbering.
  checkpoint.save_npz(linen, tmp_path / 'saved.npz')
  assert_npz_identical(tmp_path / 'saved.npz', tmp_path / 'released.npz')
  # Both numberings in one block leave it unclear which array is meant.
  mixed = released_arrays()
  mixed['Transformer/encoderblock_0/LayerNorm_1/scale'] = mixed[
      'Transformer/encoderblock_0/LayerNorm_2/scale']
  with pytest.raises(checkpoint.CheckpointError,
                     match='LayerNorm_2/scale and .*LayerNorm_1/scale are the '
                     'same parameter'):
    checkpoint.load_npz(write_npz(tmp_path / 'mixed.npz', mixed))


def test_what_is_not_a_checkpoint_is_a_clear_error(tmp_path):
  def fails(path, match):
    with pytest.raises(checkpoint.CheckpointError, match=match) as error:
      checkpoint.load_params(path)
    assert str(path) in str(error.value)

  fails(tmp_path / 'absent.npz', 'No checkpoint at')
  (tmp_path / 'text.npz').write_text('not a zip')
  fails(tmp_path / 'text.npz', 'is not a readable .npz file')
  np.save(tmp_path / 'one.npy', np.zeros(3))
  fails(tmp_path / 'one.npy', 'is a single .npy array')
  fails(write_npz(tmp_path / 'other.npz', {'x': np.zeros(3)}),
        'is not a ViT checkpoint in the official .npz layout: it has no '
        'embedding/kernel, .*It has x.')
  fails(write_npz(tmp_path / 'pickled.npz',
                  {'x': np.array([{}], dtype=object)}),
        'is not a readable .npz file')
  with pytest.raises(checkpoint.CheckpointError, match='has no config.json'):
    checkpoint.load_params(tmp_path)
  with pytest.raises(checkpoint.CheckpointError, match='step=1 only'):
    checkpoint.load_params(
        write_npz(tmp_path / 'tiny.npz', released_arrays()), step=1)


def test_save_npz_refuses_what_it_cannot_write_back(tmp_path):
  params = checkpoint.load_npz(
      write_npz(tmp_path / 'tiny.npz', released_arrays()))
  with pytest.raises(checkpoint.CheckpointError,
                     match=r"variables\['params'\]"):
    checkpoint.save_npz({'params': params}, tmp_path / 'variables.npz')
  params['cls'] = params['cls'].astype(jax.numpy.bfloat16)
  with pytest.raises(checkpoint.CheckpointError,
                     match='cls is bfloat16.*cast it to float32'):
    checkpoint.save_npz(params, tmp_path / 'bf16.npz')
  assert not (tmp_path / 'variables.npz').exists()
  assert not (tmp_path / 'bf16.npz').exists()


def test_load_params_reads_run_directories_and_their_npz(trained_vit_run,
                                                         tmp_path):
  workdir, _ = trained_vit_run
  run = checkpoint.load_run(workdir)
  params = checkpoint.load_params(workdir)
  assert_trees_identical(params, run.params)
  model = models.from_config(run.config, num_classes=10)
  checkpoint.check_params(params, checkpoint.param_shapes(model, 24))
  checkpoint.save_npz(params, tmp_path / 'run.npz')
  from_npz = checkpoint.load_params(tmp_path / 'run.npz')
  assert_trees_identical(from_npz, run.params)
  images = np.ones((1, 24, 24, 3), np.float32)
  np.testing.assert_array_equal(
      model.apply({'params': from_npz}, images, train=False),
      model.apply(run.variables, images, train=False))


_LAYOUT_SCRIPT = '''
import json, pathlib, sys
sys.path.insert(0, {root!r})
import jax
import numpy as np
from vit_jax import checkpoint, parallel, steps

values = {{'kernel': np.arange(64 * 512, dtype=np.float32).reshape(64, 512),
          'bias': np.arange(8, dtype=np.float32)}}
shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), values)
meshes = {{'replicated': parallel.make_mesh(1), 'fsdp': parallel.make_mesh(8)}}
found = []
for saved, restored_onto in (('fsdp', 'replicated'), ('replicated', 'fsdp')):
  directory = pathlib.Path(f'from_{{saved}}')
  shardings = parallel.state_shardings(shapes, meshes[saved])
  state = jax.tree.map(parallel.replicate, values, shardings)
  sums = steps.zero_sums(parallel.replicated(meshes[saved]))
  checkpoints = checkpoint.RunCheckpoints(directory, keep=2)
  checkpoints.save(1, state, sums, [{{'step': 1}}], {{'epoch': 1, 'batch': 1}})
  checkpoints.close()
  target = parallel.state_shardings(shapes, meshes[restored_onto])
  restored = checkpoint.RunCheckpoints(directory, keep=2).restore_latest(
      jax.tree.map(lambda s, t: jax.ShapeDtypeStruct(s.shape, s.dtype,
                                                     sharding=t),
                   shapes, target),
      steps.sum_shapes(parallel.replicated(meshes[restored_onto])))
  found.append(dict(
      saved_sharded=not state['kernel'].sharding.is_fully_replicated,
      equal=all(np.array_equal(restored.state[k], values[k]) for k in values),
      on_target=all(restored.state[k].sharding == target[k] for k in values)))
print(json.dumps(found))
'''


def test_a_checkpoint_restores_onto_either_parameter_layout(tmp_path):
  # Saved split over an fsdp axis of 8 devices, restored replicated, and back.
  env = {**os.environ, 'XLA_FLAGS': '--xla_force_host_platform_device_count=8'}
  out = subprocess.run(
      [sys.executable, '-c', _LAYOUT_SCRIPT.format(root=str(ROOT))], env=env,
      capture_output=True, text=True, check=False, cwd=tmp_path)
  assert out.returncode == 0, out.stderr[-3000:]
  assert json.loads(out.stdout.splitlines()[-1]) == [
      dict(saved_sharded=True, equal=True, on_target=True),
      dict(saved_sharded=False, equal=True, on_target=True)]

"""Run checkpoints saved, restored and skipped when damaged; reading runs
back on any device count."""

import json
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import pytest

from tests.conftest import ROOT
from tests.test_formats_npz import assert_trees_identical
from vit_jax import checkpoint
from vit_jax import models
from vit_jax import sharding
from vit_jax import steps
from vit_jax.formats import npz
from vit_jax.formats import params as params_lib


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
  replicated = sharding.replicated(sharding.make_mesh())
  state = {'w': sharding.replicate(np.zeros((3, 4), np.float32), replicated)}
  sums = steps.zero_sums(replicated)
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
from vit_jax import checkpoint, sharding, steps

values = {{'kernel': np.arange(64 * 512, dtype=np.float32).reshape(64, 512),
          'bias': np.arange(8, dtype=np.float32)}}
shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), values)
meshes = {{'replicated': sharding.make_mesh(1), 'fsdp': sharding.make_mesh(8)}}
found = []
for saved, restored_onto in (('fsdp', 'replicated'), ('replicated', 'fsdp')):
  directory = pathlib.Path(f'from_{{saved}}')
  shardings = sharding.state_shardings(shapes, meshes[saved])
  state = jax.tree.map(sharding.replicate, values, shardings)
  sums = steps.zero_sums(sharding.replicated(meshes[saved]))
  checkpoints = checkpoint.RunCheckpoints(directory, keep=2)
  checkpoints.save(1, state, sums, [{{'step': 1}}], {{'epoch': 1, 'batch': 1}})
  checkpoints.close()
  target = sharding.state_shardings(shapes, meshes[restored_onto])
  restored = checkpoint.RunCheckpoints(directory, keep=2).restore_latest(
      jax.tree.map(lambda s, t: jax.ShapeDtypeStruct(s.shape, s.dtype,
                                                     sharding=t),
                   shapes, target),
      steps.sum_shapes(sharding.replicated(meshes[restored_onto])))
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


def test_the_released_format_is_where_users_scripts_find_it():
  assert checkpoint.load_npz is npz.load_npz
  assert checkpoint.save_npz is npz.save_npz
  assert checkpoint.check_params is params_lib.check_params
  assert checkpoint.param_shapes is params_lib.param_shapes

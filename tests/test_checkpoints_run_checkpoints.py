"""Run checkpoints saved, restored and skipped when damaged, by all readers."""

import logging
import shutil
import time

import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp
import pytest

from tests import helpers
from vit_jax.checkpoints.run_checkpoints import RunCheckpoints
from vit_jax.errors import CheckpointError
from vit_jax.runtime import sharding
from vit_jax.training import steps

_CONFIG = {'model': 'ViT-B_16', 'batch_size': 16}


def _tiny_state():
  replicated = sharding.replicated(sharding.make_mesh())
  state = {'w': sharding.replicate(np.zeros((3, 4), np.float32), replicated)}
  return state, steps.zero_sums(replicated)


def _saved_steps(directory, steps_to_save):
  """RunCheckpoints of a state holding s at each step s, and its shapes."""
  state, sums = _tiny_state()
  with RunCheckpoints(directory, keep=5) as checkpoints:
    for step in steps_to_save:
      state = jax.tree.map(lambda a, s=step: a * 0 + s, state)
      checkpoints.save(step, state, sums, [{'step': step}],
                       {'epoch': 1, 'batch': step}, {**_CONFIG, 'step': step})
  return RunCheckpoints(directory, keep=5), jax.tree.map(
      lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding),
      (state, sums))


def test_an_intervals_checkpoint_waits_its_seconds_after_the_newest(
    tmp_path, monkeypatch):
  """Due when none is saved, then `min_seconds` after the newest, or forced."""
  sync_points = []
  monkeypatch.setattr(multihost_utils, 'reached_preemption_sync_point',
                      lambda step: sync_points.append(step) or False)
  state, sums = _tiny_state()

  def save(checkpoints, step):
    checkpoints.save(step, state, sums, [], {'epoch': 1, 'batch': step},
                     _CONFIG)
    checkpoints.check(wait=True)

  # Each closed at its block's end, the background finalization included.
  with RunCheckpoints(tmp_path / 'paced', keep=5, min_seconds=30) as paced:
    assert paced.due(1)
    save(paced, 1)
    assert not paced.due(2)
    save(paced, 3)  # the last step, or a stop signal
    assert not paced.due(4)
  with RunCheckpoints(tmp_path / 'paced', keep=5,
                      min_seconds=float('inf')) as never:
    assert not never.due(5)  # step 3's time, read from disk
  time.sleep(0.6)
  with RunCheckpoints(tmp_path / 'paced', keep=5, min_seconds=0.5) as resumed:
    assert resumed.due(5) and resumed.steps() == [1, 3]
  assert not sync_points
  with RunCheckpoints(tmp_path / 'every', keep=5) as every:
    save(every, 1)
    assert every.due(2)
    with pytest.raises(
        CheckpointError, match=r'orbax would not save step 1 in .*every \(it '
        r'holds steps \[1\]\); move the directory away.'):
      save(every, 1)


def test_restores_the_newest_checkpoint_the_loop_saved_or_says_what_to_do(
    tmp_path):
  checkpoints, shapes = _saved_steps(tmp_path / 'checkpoints', [2, 4])
  restored = checkpoints.restore_latest(*shapes)
  # Its history, position and sums resume a run exactly: test_training_train.
  assert restored.step == 4 and restored.config == {**_CONFIG, 'step': 4}
  np.testing.assert_array_equal(restored.state['w'], np.full((3, 4), 4.0))
  assert RunCheckpoints(tmp_path / 'none', 2).restore_latest(*shapes) is None
  # None restores (one damaged: test_faults): the error says what to do.
  for step in (2, 4):
    shutil.rmtree(tmp_path / 'checkpoints' / str(step) / 'state')
  with pytest.raises(
      CheckpointError, match=r'None of the checkpoints .* \(steps 2, 4\) can '
      'be restored.*Move the directory away'):
    checkpoints.restore_latest(*shapes)


def test_a_checkpoint_rotated_away_while_read_is_not_called_damaged(
    tmp_path, caplog, monkeypatch):
  """A reader lists again what a live run rotated away, without a warning."""
  caplog.set_level(logging.WARNING)
  directory = tmp_path / 'checkpoints'
  _saved_steps(directory, [2, 4])
  saved_later = tmp_path / 'later'
  _saved_steps(saved_later, [6])
  listed = ocp.CheckpointManager.all_steps
  listings = []

  # A run keeping one renamed 6 and deleted 4 as orbax listed: it found none.
  def rotating(self, *args, **kwargs):
    listings.append(listed(self, *args, **kwargs))
    return [] if len(listings) == 1 else listings[-1]

  monkeypatch.setattr(ocp.CheckpointManager, 'all_steps', rotating)
  assert RunCheckpoints(saved_later).steps() == [6] and len(listings) >= 2
  monkeypatch.undo()
  read = RunCheckpoints._restore  # pylint: disable=protected-access

  # The run saved 6 and was deleting 4 as the reader read 4.
  def rotated_while_read(self, step, *shapes):
    if step == 4:  # orbax deletes a checkpoint's files one by one: half gone
      shutil.copytree(saved_later / '6', directory / '6')
      shutil.rmtree(directory / '4' / 'state')
    return read(self, step, *shapes)

  monkeypatch.setattr(RunCheckpoints, '_restore', rotated_while_read)
  assert RunCheckpoints(directory).restore_latest().step == 6
  assert caplog.messages == []

  def deleted_while_read(self, step, *shapes):
    shutil.rmtree(directory / str(step))
    return read(self, step, *shapes)

  monkeypatch.setattr(RunCheckpoints, '_restore', deleted_while_read)
  with pytest.raises(
      CheckpointError, match=r'The checkpoints in .* \(steps 2, 4, 6\) were '
      r'deleted while they were read: a run still writing there'):
    RunCheckpoints(directory).restore_latest()
  assert caplog.messages == []
  killed = tmp_path / 'killed'  # in its first save
  (killed / '2.orbax-checkpoint-tmp-1').mkdir(parents=True)
  assert RunCheckpoints(killed).steps() == []


def test_a_reader_verifies_as_the_trainer_does_and_changes_nothing(
    tmp_path, caplog):
  caplog.set_level(logging.WARNING)
  directory = tmp_path / 'checkpoints'
  _saved_steps(directory, [2, 4])
  # Sound: everything as saved, on one device, and not a warning.
  restored = (reader := RunCheckpoints(directory)).restore_latest()
  assert restored.step == 4 and caplog.messages == []
  np.testing.assert_array_equal(restored.state['w'], np.full((3, 4), 4.0))
  assert restored.state['w'].sharding.device_set == {jax.devices()[0]}
  assert reader.latest_config() == (4, {**_CONFIG, 'step': 4})

  # Step 4 holding the sound state files of step 2: only its digest tells.
  shutil.rmtree(directory / '4' / 'state')
  shutil.copytree(directory / '2' / 'state', directory / '4' / 'state')
  reader = RunCheckpoints(directory)  # nothing cached
  assert (reader.restore_latest().step, caplog.messages) == (2, [
      f'Skipping checkpoint {directory / "4"}, which cannot be restored '
      '(DigestMismatchError: its state does not match the digest saved with '
      'it: a damaged file); trying the one before it.'
  ])
  assert reader.steps() == [2, 4]  # nothing set aside
  with pytest.raises(
      CheckpointError, match=rf'^The checkpoint {directory / "4"} cannot be '
      rf'restored \(DigestMismatchError: .*\); the others are steps \[2\]\.$'):
    reader.restore(4)
  with pytest.raises(CheckpointError,
                     match=r'No checkpoint of step 3 .*; there are \[2, 4\]'):
    reader.restore(3)

  # The config of the newest checkpoint that holds one.
  shutil.rmtree(directory / '4' / 'config')  # a checkpoint without one
  assert reader.latest_config() == (2, {**_CONFIG, 'step': 2})
  for item in ('digest', 'config'):
    shutil.rmtree(directory / '2' / item)
  assert reader.latest_config() is None
  # Saved before digests too: restored with one warning.
  caplog.clear()
  assert RunCheckpoints(directory).restore(2).config is None
  assert caplog.messages == [
      f'Checkpoint {directory / "2"} predates digests: restored unverified.'
  ]
  shutil.rmtree(directory / '2' / 'state')
  with pytest.raises(
      CheckpointError, match=r'^None of the checkpoints .* \(steps 2, 4\) can '
      r'be restored; the warnings above say why\.$'):
    RunCheckpoints(directory).restore_latest()


_LAYOUT_SCRIPT = '''
import pathlib, jax
import numpy as np
from vit_jax.checkpoints import run_checkpoints
from vit_jax.runtime import sharding
from vit_jax.training import steps

values = {'kernel': np.arange(64 * 512, dtype=np.float32).reshape(64, 512),
          'bias': np.arange(8, dtype=np.float32)}
shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), values)
meshes = {'replicated': sharding.make_mesh(1), 'fsdp': sharding.make_mesh(8)}
for saved, restored_onto in (('fsdp', 'replicated'), ('replicated', 'fsdp')):
  directory = pathlib.Path(f'from_{saved}')
  shardings = sharding.state_shardings(shapes, meshes[saved])
  state = jax.tree.map(sharding.replicate, values, shardings)
  sums = steps.zero_sums(sharding.replicated(meshes[saved]))
  with run_checkpoints.RunCheckpoints(directory, keep=2) as checkpoints:
    checkpoints.save(1, state, sums, [{'step': 1}], {'epoch': 1, 'batch': 1},
                     {})
  target = sharding.state_shardings(shapes, meshes[restored_onto])
  onto = jax.tree.map(lambda s, t: s.update(sharding=t), shapes, target)
  restored = run_checkpoints.RunCheckpoints(directory, keep=2).restore_latest(
      onto, steps.sum_shapes(sharding.replicated(meshes[restored_onto])))
  as_saved = run_checkpoints.RunCheckpoints(directory).restore_latest()
  assert state['kernel'].sharding.is_fully_replicated == (saved != 'fsdp')
  for k in values:
    np.testing.assert_array_equal(restored.state[k], values[k])
    assert restored.state[k].sharding == target[k]
    np.testing.assert_array_equal(as_saved.state[k], values[k])
    assert len(as_saved.state[k].sharding.device_set) == 1
print('restored')
'''


def test_a_checkpoint_restores_onto_either_parameter_layout(tmp_path):
  # Saved split over an fsdp axis of 8 devices, restored replicated, and back;
  # a reader restores either onto one device.
  out = helpers.run_on_host_devices(_LAYOUT_SCRIPT, 8, cwd=tmp_path)
  assert out.splitlines()[-1] == 'restored'

"""A run's best evaluation kept beside its checkpoints, and read back."""

import functools
import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from vit_jax.checkpoints import best_checkpoint
from vit_jax.checkpoints import reading
from vit_jax.data import sources
from vit_jax.errors import CheckpointError
from vit_jax.errors import ConfigError
from vit_jax.errors import DatasetError
from vit_jax.training import evaluation
from vit_jax.training import train

_held = functools.partial(helpers.steps_saved, folder=best_checkpoint.DIRECTORY)


def test_the_best_evaluation_is_kept_and_a_resumed_run_keeps_the_same(
    cifar10_dir, tmp_path, monkeypatch):
  """Chosen on held-out validation examples, never the test split."""
  # Every other step evaluated and checkpointed, all checkpoints kept: the
  # best one's state is also in checkpoints/.
  fields = dict(total_steps=12, eval_every_steps=2, checkpoint_every_steps=2,
                keep_checkpoints=6, keep_best_checkpoint=True,
                train_examples=72, validation_examples=16)
  config = helpers.tiny_config(cifar10_dir, **fields)
  summary = train.train_and_evaluate(config, tmp_path / 'whole')
  records = [r for r in helpers.history(tmp_path / 'whole') if 'test_loss' in r]
  assert {r['validation_examples'] for r in records} == {16}
  chosen = max(records, key=lambda r: r['validation_accuracy'])  # the first
  best = summary['best_step']
  assert (best, summary['chosen_on'], summary['best_validation_accuracy'],
          summary['test_accuracy_at_best_step']) == (
              chosen['step'], 'validation', chosen['validation_accuracy'],
              chosen['test_accuracy'])
  assert 'best_test_accuracy' not in summary
  assert summary['final_validation_accuracy'] == records[-1][
      'validation_accuracy']
  evaluated = evaluation.evaluate(tmp_path / 'whole' / 'best_checkpoint',
                                  split='validation')
  assert (evaluated['split'], evaluated['top1'],
          evaluated['examples']) == ('validation',
                                     chosen['validation_accuracy'], 16)
  for field, value in (('validation_examples', 8), ('train_examples_per_file',
                                                    12)):
    other = config.copy_and_resolve_references()
    other[field] = value  # a draw holding images it trained on
    with pytest.raises(ConfigError, match=f'{field}={value} differs from'):
      evaluation.evaluate(tmp_path / 'whole', config=other, split='validation')
  # Its data moved: the same draw. Other data: refused, to resume too.
  moved = str(shutil.copytree(cifar10_dir, tmp_path / 'moved'))
  assert evaluation.evaluate(tmp_path / 'whole' / 'best_checkpoint',
                             data_dir=moved, split='validation') == evaluated
  other = str(helpers.cifar10_release(tmp_path / 'other', 96, seeds=(5, 3)))
  with pytest.raises(DatasetError, match='data gives here: evaluate it on'):
    evaluation.evaluate(tmp_path / 'whole', data_dir=other, split='validation')
  with pytest.raises(DatasetError, match='other validation examples'):
    train.train_and_evaluate(helpers.tiny_config(other, **fields),
                             tmp_path / 'whole')
  # The test split as logged, from one training image a device.
  converted = []
  monkeypatch.setattr(
      sources, 'to_arrays',
      lambda source, size, to_arrays=sources.to_arrays: converted.append(
          len(source)) or to_arrays(source, size))
  evaluated = evaluation.evaluate(tmp_path / 'whole' / 'best_checkpoint')
  assert evaluated['top1'] == chosen['test_accuracy']
  assert converted == [jax.device_count(), evaluated['examples']]
  # The newest held is the best; older ones serve older checkpoints.
  assert _held(tmp_path / 'whole')[-1] == best
  run = reading.load_run(tmp_path / 'whole', best=True)
  assert run.step == best
  jax.tree.map(np.testing.assert_array_equal, run.params,
               reading.load_run(tmp_path / 'whole', best).params)
  # The folder is a source of its own, as evaluate, analyze and convert read.
  folder = tmp_path / 'whole' / best_checkpoint.DIRECTORY
  assert reading.source_kind(folder) == reading.WORKDIR
  loaded = reading.load(folder)
  assert loaded.step == best and loaded.config == run.config
  assert reading.trained_pixels(folder) == loaded.pixels
  with pytest.raises(CheckpointError, match='pass a step or its best '
                     'checkpoint, not both'):
    reading.load_run(folder, step=1)
  # As if killed after saving the best, before the checkpoint that follows
  # it: the best is ahead of where the run resumes, and is saved again.
  assert best > 2
  shutil.copytree(tmp_path / 'whole', tmp_path / 'resumed')
  for step in range(best, 13, 2):
    shutil.rmtree(tmp_path / 'resumed' / 'checkpoints' / str(step))
  # A run that trains steps writes its summary again, over the copy's.
  copied = tmp_path / 'resumed' / 'summary.json'
  copied.write_text(json.dumps({'best_step': -1}))
  resumed = train.train_and_evaluate(config, tmp_path / 'resumed')
  assert resumed['best_step'] == best
  assert json.loads(copied.read_text()) == resumed
  # Run again once finished, without the field: nothing to train, nothing
  # deleted.
  config.keep_best_checkpoint = False
  train.train_and_evaluate(config, tmp_path / 'resumed')
  assert _held(tmp_path / 'resumed') == _held(tmp_path / 'whole')
  jax.tree.map(np.testing.assert_array_equal,
               reading.load_run(tmp_path / 'resumed', best=True).params,
               run.params)


def _offer(best, history, step, accuracy):
  history.append({'step': step, 'test_accuracy': accuracy})
  best.offer(history[-1], {'params': {'w': jnp.full(2, step)}},
             {'loss': jnp.zeros(())}, list(history), {}, {})


def test_every_checkpoint_a_run_may_resume_from_keeps_its_best(
    tmp_path, caplog):
  history = []
  best = best_checkpoint.BestCheckpoint(tmp_path, True, history, 0, [], 2)
  _offer(best, history, 2, 0.5)
  best.wait()
  best.prune(3)  # the regular checkpoint of step 3
  _offer(best, history, 4, 0.6)
  best.close()
  # Killed after the best of step 4, before the regular checkpoint after
  # it: resumed from step 3, whose best (step 2) is still there.
  history = history[:1]
  best = best_checkpoint.BestCheckpoint(tmp_path, True, history, 3, [3], 2)
  assert _held(tmp_path) == [2]
  for step, accuracy in ((4, 0.6), (6, 0.7)):
    _offer(best, history, step, accuracy)
    best.wait()
    best.prune(step + 1)  # regular checkpoints 5 and 7
  # The regular checkpoints kept are 5 and 7 (and 3 until 7 is complete):
  # their bests are 4 and 6 (and 2).
  assert _held(tmp_path) == [2, 4, 6]
  best.prune(9)
  assert _held(tmp_path) == [4, 6]
  best.close()
  # Resumed from 7 when 9 is damaged: its best is there.
  best = best_checkpoint.BestCheckpoint(tmp_path, True, history, 7, [5, 7], 2)
  assert _held(tmp_path) == [4, 6]
  best.close()
  # Resumed without the field: the bests are deleted, and the log says so.
  best_checkpoint.BestCheckpoint(tmp_path, False, history, 7, [5, 7], 2).close()
  assert _held(tmp_path) == []
  assert 'keep_best_checkpoint is off: deleted' in caplog.text

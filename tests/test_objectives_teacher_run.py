"""A trained run read as the frozen teacher of another run's step."""

import json
import shutil

import jax
import numpy as np
import pytest

from tests import helpers
from vit_jax.checkpoints import reading
from vit_jax.errors import ConfigError
from vit_jax.errors import DatasetError
from vit_jax.models import SimpleCNN
from vit_jax.objectives import teacher_run
from vit_jax.training import train


@pytest.mark.parametrize('field',
                         ['distillation_teacher', 'locality_guidance_teacher'])
def test_the_teacher_is_the_runs_model_and_variables(trained_cnn_run, field):
  workdir, data_dir = trained_cnn_run
  config = helpers.tiny_config(data_dir, dtype='bfloat16',
                               **{field: str(workdir)})
  module, variables = teacher_run.load(config, field, 10, helpers.one_device())
  # A SimpleCNN that computes as the student does.
  assert (type(module), module.dtype,
          set(variables)) == (SimpleCNN, 'bfloat16', {'params', 'batch_stats'})
  assert np.all(np.isfinite(jax.tree.leaves(variables)[0]))


def test_a_teacher_read_at_its_best_is_its_best_evaluations_state(
    trained_cnn_run):
  workdir, data_dir = trained_cnn_run
  summary = json.loads((workdir / 'summary.json').read_text())
  config = helpers.tiny_config(data_dir, teacher_checkpoint='best',
                               distillation_teacher=str(workdir))
  _, variables = teacher_run.load(config, 'distillation_teacher', 10,
                                  helpers.one_device())
  assert summary['best_step'] != reading.load_run(workdir).step  # two states
  at_best = reading.load_run(workdir, step=summary['best_step']).variables
  jax.tree.map(np.testing.assert_array_equal, variables, at_best)


def test_a_teacher_that_saw_other_inputs_is_a_clear_error(
    trained_cnn_run, tmp_path):
  """A missing run: test_checkpoints_reading, wrapped as the damaged one is."""
  workdir, data_dir = trained_cnn_run
  field = 'locality_guidance_teacher'
  config = helpers.tiny_config(data_dir, pixel_mean=(0.4, 0.5, 0.5),
                               **{field: str(workdir)})
  with pytest.raises(
      ConfigError, match=rf'^config.{field}=.* was trained '
      r'with pixel_mean=.*: the teacher must see the same '
      r'inputs; set --config.pixel_mean to the teacher'):
    teacher_run.load(config, field, 10, helpers.one_device())
  config.pixel_mean = helpers.tiny_config(data_dir).pixel_mean
  with pytest.raises(
      ConfigError, match=r'classifies 10 classes, this run\'s '
      'data has 3: the teacher must know the same classes.$'):
    teacher_run.load(config, field, 3, helpers.one_device())
  # As many classes, named otherwise: the run stops before it trains.
  renamed = shutil.copytree(workdir, tmp_path / 'renamed')
  (renamed / 'classes.json').write_text(json.dumps(['dog'] * 10))
  config = helpers.tiny_config(data_dir, distillation_teacher=str(renamed),
                               model_fields=dict(distillation_token=True))
  with pytest.raises(
      DatasetError, match="distillation_teacher=.* label 0 "
      "for the class 'dog', but its data names it 'airplane'"):
    train.train_and_evaluate(config, tmp_path / 'run')
  assert not (tmp_path / 'run' / 'checkpoints').exists()


def test_a_teacher_without_a_sound_checkpoint_is_refused_in_one_line(
    trained_cnn_run, tmp_path):
  workdir, data_dir = trained_cnn_run
  damaged = shutil.copytree(workdir, tmp_path / 'teacher')
  for step_dir in (damaged / 'checkpoints').glob('[0-9]*'):
    shutil.rmtree(step_dir / 'state')
  config = helpers.tiny_config(data_dir, distillation_teacher=str(damaged))
  with pytest.raises(
      ConfigError, match=rf'^config.distillation_teacher={damaged}: None of '
      rf'the checkpoints in .* can be restored; the warnings above say why\.$'):
    teacher_run.load(config, 'distillation_teacher', 10, helpers.one_device())

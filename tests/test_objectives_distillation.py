"""DeiT's distillation: a run's workdir teaches the student's token."""

import json

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from tests import helpers
from tests import test_training_steps
from tests import test_training_train
from vit_jax import models
from vit_jax.checkpoints import reading
from vit_jax.data import preprocess
from vit_jax.errors import ConfigError
from vit_jax.objectives import distillation
from vit_jax.objectives import losses
from vit_jax.runtime import sharding
from vit_jax.training import evaluation
from vit_jax.training import flops
from vit_jax.training import train


def _student_config(data_dir, teacher_workdir, **overrides):
  return helpers.tiny_config(data_dir, num_epochs=1, warmup_epochs=0,
                             distillation_teacher=str(teacher_workdir),
                             model_fields=dict(distillation_token=True),
                             **overrides)


# Slow: test_a_distilled_run_trains_and_evaluates runs the same objective.
@pytest.mark.slow
def test_the_distillation_head_learns_the_teachers_classes(trained_cnn_run):
  # The step's loss at the initial parameters is half the class head's
  # cross-entropy with the (smoothed) labels plus half the distillation
  # head's with the teacher's argmax on the same images.
  teacher_workdir, data_dir = trained_cnn_run
  config = _student_config(data_dir, teacher_workdir)
  config.model_overrides.dropout_rate = 0.0
  teacher = distillation.load_teacher(
      config, 10, sharding.replicated(test_training_steps.one_device_mesh()))
  step, state, inputs = test_training_steps.one_device_train_step(
      config, *helpers.random_cifar(16, 10, seed=0),
      teacher.objective(losses.classification))
  # Class and distillation heads start at zero: give them distinct weights.
  params = jax.tree_util.tree_map_with_path(
      lambda path, x:
      (jax.random.normal(jax.random.key(len(str(path))), x.shape) * 0.1
       if 'head' in str(path) else x), state.params)
  batch, key = np.arange(16, dtype=np.int32), jax.random.key(1)
  _, metrics = step(state.replace(params=params), batch=batch, key=key)

  augment_key, _ = jax.random.split(jax.random.fold_in(key, 0))
  x, y = inputs.model_inputs(inputs.train_data, batch, augment_key)
  _, out = state.apply_fn({'params': params}, x, train=False, return_out=True)
  class_logits, distillation_logits = (out['class_logits'],
                                       out['distillation_logits'])
  teacher_labels = np.argmax(
      teacher.module.apply(teacher.variables, x, train=False), -1)
  targets = optax.smooth_labels(jax.nn.one_hot(y, 10), config.label_smoothing)
  expected = 16 * (optax.softmax_cross_entropy(class_logits, targets).mean() +
                   optax.softmax_cross_entropy_with_integer_labels(
                       distillation_logits, teacher_labels).mean()) / 2
  np.testing.assert_allclose(metrics['loss'], expected, rtol=1e-5)
  average = (class_logits + distillation_logits) / 2
  assert metrics['correct'] == np.sum(np.argmax(average, -1) == y)


# Slow: tests/test_objectives_locality_guidance.py trains and evaluates a distilled
# student too (with guidance).
@pytest.mark.slow
def test_a_distilled_run_trains_and_evaluates(trained_cnn_run, tmp_path):
  teacher_workdir, data_dir = trained_cnn_run
  summary = train.train_and_evaluate(_student_config(data_dir, teacher_workdir),
                                     tmp_path / 'student')
  records = helpers.history(tmp_path / 'student')
  assert np.isfinite(records[-1]['train_loss'])
  assert 0 <= records[-1]['test_accuracy'] <= 1
  # Its compute counts the teacher's forward pass on each image.
  student = models.from_config(_student_config(data_dir, teacher_workdir), 10)
  teacher_run = reading.load_run(teacher_workdir)
  student_run = reading.load_run(tmp_path / 'student')
  assert summary['train_flops'] == summary['steps'] * 16 * (
      3 * flops.forward_flops_per_image(student, student_run.variables, 32) +
      flops.forward_flops_per_image(models.from_config(teacher_run.config, 10),
                                    teacher_run.variables, 32))
  # Its class head alone, as evaluate reads it with --class_head.
  images, labels = helpers.random_cifar(16, 10, seed=3)  # its test split
  _, out = student.apply(
      student_run.variables,
      preprocess.eval_input(images, image_size=32,
                            mean=student_run.config.pixel_mean,
                            std=student_run.config.pixel_std), train=False,
      return_out=True)
  evaluated = evaluation.evaluate(tmp_path / 'student', class_head=True)
  assert evaluated['head'] == 'class' and evaluated['top1'] == pytest.approx(
      float(np.mean(np.argmax(out['class_logits'], -1) == labels)), abs=1e-6)
  with pytest.raises(ConfigError, match='has one head'):
    evaluation.evaluate(teacher_workdir, class_head=True)
  # The student's summary names its teacher's run and what it achieved.
  teacher = json.loads((teacher_workdir / 'summary.json').read_text())
  assert summary['runs_read'] == dict(distillation_teacher=dict(
      workdir=str(teacher_workdir), checkpoint='last', **{
          k: teacher[k]
          for k in ('chosen_on', 'best_step', 'best_test_accuracy',
                    'test_accuracy_at_best_step', 'commit', 'finished')
      }))
  # Two processes, each reading the teacher, train as one process did.
  config_file = helpers.write_process_config(
      tmp_path, data_dir, 'tiny_config', num_epochs=1, warmup_epochs=0,
      distillation_teacher=str(teacher_workdir),
      model_overrides=dict(distillation_token=True))
  processes, logs = helpers.start_two_processes(config_file, tmp_path / 'two',
                                                tmp_path)
  assert helpers.wait_all(processes) == [0, 0], logs[0].read_text()[-3000:]
  test_training_train.assert_logged_as(tmp_path / 'two', tmp_path / 'student')
  # Trained again (its summary moved away) once the teacher's summary is gone,
  # it records the teacher as its first start-up read it.
  (tmp_path / 'student' / 'summary.json').rename(tmp_path / 'first.json')
  (teacher_workdir / 'summary.json').rename(tmp_path / 'teacher.json')
  try:
    again = train.train_and_evaluate(_student_config(data_dir, teacher_workdir),
                                     tmp_path / 'student')
  finally:
    (tmp_path / 'teacher.json').rename(teacher_workdir / 'summary.json')
  assert again['runs_read'] == summary['runs_read']


class _LinearTeacher(nn.Module):
  """A teacher applied as the train step applies one."""

  @nn.compact
  def __call__(self, x, *, train):
    del train
    return nn.Dense(3)(x)


@pytest.mark.parametrize('target', ['hard', 'soft'])
def test_the_distillation_head_learns_the_teachers_class_or_probabilities(
    target):
  images = helpers.normal((4, 5), 0)
  module = _LinearTeacher()
  variables = {'params': helpers.random_params(module, images, train=False)}
  teacher = distillation.Teacher(module, variables, 'workdir', target,
                                 temperature=2.0)
  outputs = dict(class_logits=helpers.normal((4, 3), 2),
                 distillation_logits=helpers.normal((4, 3), 3))
  targets = jax.nn.one_hot(jnp.array([0, 1, 2, 0]), 3)

  base = lambda logits, outputs, targets, images: optax.softmax_cross_entropy(
      logits, targets)

  @jax.jit  # one program, not one per operation
  def loss_and_expected(outputs, targets, images):
    teacher_logits = module.apply(variables, images, train=False)
    student = outputs['distillation_logits']
    if target == 'hard':
      learned = optax.softmax_cross_entropy_with_integer_labels(
          student, jnp.argmax(teacher_logits, -1))
    else:  # T^2 KL(teacher || student), both at temperature T = 2
      p = jax.nn.softmax(teacher_logits / 2)
      learned = 4 * jnp.sum(p *
                            (jnp.log(p) - jax.nn.log_softmax(student / 2)), -1)
    return (teacher.objective(base)(None, outputs, targets, images),
            (optax.softmax_cross_entropy(outputs['class_logits'], targets) +
             learned) / 2)

  np.testing.assert_allclose(*loss_and_expected(outputs, targets, images),
                             rtol=1e-5)

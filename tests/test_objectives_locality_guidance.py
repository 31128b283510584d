"""Locality guidance: guided blocks imitate a CNN run; a plain ViT stays."""

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests import helpers
from vit_jax.checkpoints import export
from vit_jax.checkpoints import reading
from vit_jax.errors import ConfigError
from vit_jax.models import SimpleCNN
from vit_jax.models import SmallResNet
from vit_jax.models import VisionTransformer
from vit_jax.models import names
from vit_jax.objectives import locality_guidance
from vit_jax.training import finetune
from vit_jax.training import startup
from vit_jax.training import train

# The tiny SimpleCNN of `trained_cnn_run` (widths 4, 4, 8, 8, 8) ends its
# stages in 4, 8 and 8 channels.
TINY_CNN_STAGES = (4, 8, 8)


def test_imitation_is_the_mean_squared_error_on_the_larger_grid():
  ours, theirs = (helpers.normal((2, 4, 4, 3), seed) for seed in (0, 1))
  np.testing.assert_allclose(
      locality_guidance.imitation([ours], [theirs]),
      np.mean(np.square(np.asarray(ours) - np.asarray(theirs)), axis=(1, 2, 3)),
      rtol=1e-6)
  # A map constant over its grid stays so, resized bilinearly to the other's
  # grid, whichever side is the smaller; the pairs' losses add up.
  level = jnp.arange(2.0).reshape(2, 1, 1, 1)
  small, large = jnp.broadcast_to(level, (2, 2, 2, 5)), jnp.zeros((2, 8, 8, 5))
  np.testing.assert_allclose(
      locality_guidance.imitation([small, large, ours], [large, small, theirs]),
      2 * np.square([0.0, 1.0]) + locality_guidance.imitation([ours], [theirs]),
      rtol=1e-6)


@pytest.mark.parametrize('module', [
    SimpleCNN(widths=(4, 4, 8, 8, 8)),
    SmallResNet(stage_widths=(4, 8, 16), blocks_per_stage=1)
], ids=['SimpleCNN', 'SmallResNet'])
def test_the_objective_adds_the_weighted_imitation_of_the_cnn_to_any_base(
    module):
  images = helpers.normal((3, 32, 32, 3), 2)
  variables = helpers.random_cnn_variables(module, images)
  guide = locality_guidance.Guide(module, variables, 'cnn', weight=2.5)
  maps = tuple(
      helpers.normal((3, 8, 8, width), 3 + k)
      for k, width in enumerate(module.feature_widths))

  # Any per-example loss.
  base = lambda logits, outputs, targets, images: jnp.sum(logits, axis=-1)

  logits = helpers.normal((3, 10), 9)

  @jax.jit  # one program, not one per operation
  def guided_and_imitation(maps, images):
    _, teacher = module.apply(variables, images, train=False, return_out=True)
    return (guide.objective(base)(logits, {'guided_features': maps}, None,
                                  images),
            2.5 * locality_guidance.imitation(list(maps), teacher['stages']))

  guided, imitation = guided_and_imitation(maps, images)
  unguided = base(logits, {}, None, images)
  # Both terms of a size the tolerance sees.
  assert np.all(np.abs(unguided) > 1e-3 * np.abs(imitation))
  np.testing.assert_allclose(guided, unguided + imitation, rtol=1e-5)


def _guided_config(data_dir, teacher_workdir, distilled=False, **overrides):
  config = helpers.tiny_config(
      data_dir, num_epochs=1, warmup_epochs=0,
      locality_guidance_teacher=str(teacher_workdir),
      model_fields=dict(num_layers=3, guided_blocks=(0, 1, 2),
                        guidance_widths=TINY_CNN_STAGES), **overrides)
  if distilled:
    config.distillation_teacher = str(teacher_workdir)
    config.model_overrides.distillation_token = True
  return config


@pytest.mark.slow  # 34 s; the objective and the guided model are tested apart
# by default (test_the_objective_adds_..., test_models_layers_guidance)
def test_a_guided_deit_student_trains_and_leaves_a_plain_vit(
    trained_cnn_run, tmp_path):
  teacher_workdir, data_dir = trained_cnn_run
  workdir = tmp_path / 'guided'
  student = lambda **o: _guided_config(data_dir, teacher_workdir, True, **o)
  train.train_and_evaluate(student(), workdir)
  assert np.isfinite(helpers.history(workdir)[-1]['train_loss'])

  # Evaluation, analysis, export and fine-tuning get the ViT without the
  # projections, which only the training loss reads.
  loaded = reading.load(workdir)
  assert isinstance(loaded.model, VisionTransformer)
  assert not any(name.startswith('locality_guidance') for name in loaded.params)
  assert set(reading.load_params(workdir)) == set(loaded.params)
  export.convert(workdir, tmp_path / 'model.npz', 'npz')
  released = reading.load(tmp_path / 'model.npz')
  images = np.asarray(helpers.normal((2, 32, 32, 3), 4))
  np.testing.assert_allclose(
      released.model.apply(released.variables, images, train=False),
      loaded.model.apply(loaded.variables, images, train=False), rtol=1e-6,
      atol=1e-6)
  # A guided run fine-tuned from it starts its projections afresh.
  finetune.check_init_from(student(init_from=str(workdir)))


def test_a_run_that_teaches_and_guides_is_run_once_a_step(
    trained_cnn_run, tmp_path):
  teacher_workdir, data_dir = trained_cnn_run
  config = _guided_config(data_dir, teacher_workdir, distilled=True)
  _, objective, teachers = startup.trained_model_and_objective(
      config, 10, helpers.one_device())
  [(module, variables)] = teachers  # the trainer counts its FLOPs once
  logits = helpers.normal((2, 10), 1)
  outputs = {
      'class_logits': logits, 'distillation_logits': logits, 'guided_features':
          [helpers.normal((2, 4, 4, w), 2) for w in TINY_CNN_STAGES]
  }

  def convolutions(function):
    program = jax.jit(function).lower(helpers.normal((2, 32, 32, 3), 3))
    return program.compile().as_text().count(' convolution(')

  assert convolutions(lambda images: objective(
      logits, outputs, jax.nn.one_hot(jnp.arange(2), 10), images)) == (
          convolutions(
              lambda images: module.apply(variables, images, train=False))) > 0
  # Another run, even a copy, is read and counted apart.
  config.distillation_teacher = str(
      shutil.copytree(teacher_workdir, tmp_path / 'copy'))
  assert len(
      startup.trained_model_and_objective(config, 10,
                                          helpers.one_device())[2]) == 2


def test_a_teacher_of_other_widths_is_one_line_saying_which(trained_cnn_run):
  teacher_workdir, data_dir = trained_cnn_run
  config = _guided_config(data_dir, teacher_workdir)
  config.model_overrides.guidance_widths = (4, 8, 16)
  with pytest.raises(
      ConfigError,
      match=(r"stages end in \(4, 8, 8\) channels, but config.model_overrides."
             r"guidance_widths=\(4, 8, 16\): set --config.model_overrides."
             r"guidance_widths='\(4, 8, 8\)'")):
    locality_guidance.load_guide(config, 10, helpers.one_device())


def test_an_unfinished_teacher_teaches_with_a_warning(trained_cnn_run, tmp_path,
                                                      caplog):
  teacher_workdir, data_dir = trained_cnn_run
  unfinished = shutil.copytree(teacher_workdir, tmp_path / 'teacher')
  (unfinished / 'summary.json').unlink()
  assert locality_guidance.load_guide(_guided_config(data_dir, unfinished), 10,
                                      helpers.one_device())
  assert (f'config.locality_guidance_teacher={unfinished} has not finished '
          'training: it teaches as its step') in caplog.text


def test_a_vit_run_as_the_teacher_is_refused(trained_vit_run):
  workdir, data_dir = trained_vit_run
  config = _guided_config(data_dir, workdir, image_size=24)
  with pytest.raises(
      ConfigError, match='trained a VisionTransformer; '
      'locality guidance imitates a CNN'):
    locality_guidance.load_guide(config, 10, helpers.one_device())


VIT = helpers.small_vit(num_layers=3)


def test_guidance_adds_only_its_projections_of_the_blocks_patch_tokens():
  model = locality_guidance.GuidedViT(VIT, (0, 2), (6, 10))
  images = helpers.images()
  variables = {'params': helpers.random_params(model, images, train=False)}
  plain = helpers.param_shapes(VIT, images)
  hidden = helpers.SMALL['hidden_size']
  assert helpers.param_shapes(model, images) == {
      **plain, 'locality_guidance_0/kernel': (hidden, 6),
      'locality_guidance_0/bias': (6,), 'locality_guidance_1/kernel':
          (hidden, 10), 'locality_guidance_1/bias': (10,)
  }

  logits, out = model.apply(variables, images, train=False, return_out=True)
  _, state = VIT.apply(variables, images, train=False,
                       capture_intermediates=True, mutable=['intermediates'])
  blocks = state['intermediates']['Transformer']
  grid = images.shape[1] // helpers.SMALL['patch_size']
  for k, block in enumerate((0, 2)):
    tokens = blocks[f'encoderblock_{block}']['__call__'][0][:, 1:]  # no [CLS]
    projection = variables['params'][f'locality_guidance_{k}']
    expected = (tokens @ projection['kernel'] + projection['bias']).reshape(
        images.shape[0], grid, grid, -1)
    np.testing.assert_allclose(out['guided_features'][k], expected, rtol=1e-5,
                               atol=1e-6)

  # Without the projections (what evaluation, export and fine-tuning get)
  # the plain ViT gives the same logits.
  pure = {'params': names.inference_params(variables['params'])}
  assert set(helpers.flat(pure['params'])) == set(plain)
  np.testing.assert_array_equal(VIT.apply(pure, images, train=False), logits)


@pytest.mark.parametrize('vit,blocks,widths,message',
                         [(VIT, (0, 2), (6,), 'same length'),
                          (VIT, (2, 0), (6, 6), 'increasing order'),
                          (VIT, (0, 3), (6, 6), r'each in 0\.\.2'),
                          (VIT, (0,), (0,), 'must be positive'),
                          (VIT.clone(scan=True), (0,),
                           (6,), 'set scan=False'),])
def test_guidance_fields_are_checked_in_one_line(vit, blocks, widths, message):
  with pytest.raises(ValueError, match=message):
    locality_guidance.GuidedViT(vit, blocks, widths)

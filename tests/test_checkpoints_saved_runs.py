"""Runs saved with training-only parameters load as ViTs, and resume."""

import shutil

import numpy as np

from tests import helpers
from vit_jax.checkpoints import reading
from vit_jax.models import VisionTransformer
from vit_jax.training import train

SAVED = helpers.ROOT / 'tests' / 'data' / 'saved_runs'


def test_saved_runs_load_as_plain_vits_without_what_only_training_read():
  images = helpers.random_cifar(4, 10, seed=0)[0].astype(np.float32) / 255
  for run, extra in (('mae', {'mae_decoder'}),
                     ('guided', {f'locality_guidance_{k}' for k in range(3)})):
    assert extra <= set(reading.load_run(SAVED / run).params)
    loaded = reading.load(SAVED / run)
    assert isinstance(loaded.model, VisionTransformer)
    assert not extra & set(loaded.params)
    assert not extra & set(reading.load_params(SAVED / run))  # init_from's
    logits = loaded.model.apply(loaded.variables, images, train=False)
    assert logits.shape == (4, 10) and np.all(np.isfinite(logits))


def test_a_saved_mae_run_resumes(tmp_path):
  # The data and config it was trained with.
  helpers.cifar10_release(tmp_path / 'data', 32, 16)
  workdir = shutil.copytree(SAVED / 'mae', tmp_path / 'mae')
  mae = dict(mae_mask_ratio=0.75, mae_decoder_depth=1, mae_decoder_width=32)
  config = helpers.tiny_config(tmp_path / 'data', total_steps=4, num_epochs=0,
                               warmup_epochs=0, cpu_devices=1,
                               checkpoint_every_steps=2, eval_every_steps=2,
                               log_every_steps=1, model_fields=mae)
  before = reading.load_run(workdir, 2).params
  summary = train.train_and_evaluate(config, workdir)
  assert np.isfinite(summary['best_test_accuracy'])
  after = reading.load_run(workdir, 4).params
  assert set(after) == set(before)
  assert not np.allclose(after['mae_decoder']['embed']['kernel'],
                         before['mae_decoder']['embed']['kernel'])

"""Reading runs back onto one device, verified, config.json lost or not."""

import json
import logging
import re
import shutil

import jax
import numpy as np
import pytest

from tests.test_formats_npz import assert_trees_identical
from vit_jax import models
from vit_jax.checkpoints import reading
from vit_jax.errors import CheckpointError
from vit_jax.errors import WorkdirError
from vit_jax.formats import params as params_lib
from vit_jax.formats import safetensors_file


def test_loads_a_run_trained_on_other_devices_onto_one(trained_vit_run, caplog):
  caplog.set_level(logging.WARNING)
  workdir, _ = trained_vit_run
  run = reading.load_run(workdir)
  assert caplog.messages == []  # a sound checkpoint, verified
  assert (run.step, run.config.image_size, run.batch_stats) == (6, 24, {})
  assert run.config.model_overrides.num_layers == 2
  assert set(run.variables) == {'params'}
  placed = {x.sharding.device_set.pop() for x in jax.tree.leaves(run.params)}
  assert placed == {jax.devices()[0]}
  # The restored parameters drive the model they were trained as, and are
  # load_params' (its exports': tests/test_checkpoints_export.py).
  model = models.from_config(run.config, num_classes=10)
  logits = model.apply(run.variables, np.ones((2, 24, 24, 3)), train=False)
  assert logits.shape == (2, 10) and np.all(np.isfinite(logits))
  params = reading.load_params(workdir)
  assert_trees_identical(params, run.params)
  params_lib.check_params(params, params_lib.param_shapes(model, 24))


def test_a_lost_config_json_is_read_from_the_checkpoint_or_rebuilt(
    trained_vit_run, tmp_path, caplog):
  """A reader reads it and changes nothing; a run rebuilds config.json."""
  caplog.set_level(logging.WARNING)
  workdir = shutil.copytree(trained_vit_run[0], tmp_path / 'run')
  config_file, newest = workdir / 'config.json', workdir / 'checkpoints' / '6'
  original = json.loads(config_file.read_text())
  assert reading.saved_config(workdir) == original
  config_file.write_text(config_file.read_text()[:100])  # truncated
  assert reading.saved_config(workdir) == original
  assert json.loads(config_file.read_text()) == original
  config_file.unlink()
  assert reading.load_run(workdir).config.to_dict() == original
  assert not config_file.exists()  # a reader changes nothing
  assert (reading.saved_config(workdir), json.loads(config_file.read_text()),
          len(caplog.messages)) == (original, original, 3)
  assert caplog.messages[0].startswith(f'{config_file} is not valid JSON (')
  assert caplog.messages[1:] == [
      f'{config_file} is missing: reading the config saved with checkpoint '
      f'{newest}.', f'{config_file} is missing: rebuilt from the config saved '
      f'with checkpoint {newest}.'
  ]
  # Checkpoints that hold no config of the run (and no digest).
  config_file.unlink()
  for item in ('config', 'digest'):
    shutil.rmtree(newest / item)
  with pytest.raises(
      CheckpointError, match=r'config.json is missing, and the checkpoints .* '
      r'hold no config of their own: nothing says which '
      r"model they are\. Put back the run's config.json\.$"):
    reading.load_run(workdir)
  with pytest.raises(
      WorkdirError, match=r'config.json is missing, and the checkpoints in .* '
      r'hold no config of their own: .* Pass a new '
      r'--workdir, or move .*/checkpoints away to start afresh here\.$'):
    reading.saved_config(workdir)


def test_a_source_is_told_by_its_contents_and_a_missing_one_refused(
    trained_vit_run, tmp_path):
  with pytest.raises(CheckpointError, match='has no config.json'):
    reading.load_run(tmp_path)
  workdir, _ = trained_vit_run
  (tmp_path / 'config.json').write_text('{}')
  with pytest.raises(CheckpointError, match='holds no checkpoint'):
    reading.load_run(tmp_path)
  with pytest.raises(
      CheckpointError, match=(
          rf'^{workdir} kept no best checkpoint .*: its run trained without '
          r'--config.keep_best_checkpoint=True.*teacher_checkpoint=last\.$')):
    reading.load_run(workdir, best=True)

  # Exports' kinds: tests/test_checkpoints_export.py.
  assert reading.source_kind(workdir) == reading.WORKDIR
  safetensors_file.write(tmp_path / 'other.safetensors',
                         {'conv1.weight': np.zeros(3, np.float32)})
  (tmp_path / 'empty').mkdir()
  for source, said in (
      (tmp_path / 'other.safetensors',
       r"neither timm's nor transformers' ViT arrays \(it has conv1.weight\)"),
      (tmp_path / 'empty', r'holds no checkpoint: pass a vit_jax.main workdir '
       r'\(or its best_checkpoint\), an official .npz'),
      ('', '^No checkpoint given: pass a'),  # --checkpoint=
      (workdir / 'checkpoints', re.escape(f'pass the run, {workdir}.')),
      (workdir / 'checkpoints' / '6', re.escape(f'{workdir} (--step=6)'))):
    with pytest.raises(CheckpointError, match=said):
      reading.source_kind(source)
  # A run that kept no best state points to its newest; a URL is not read.
  for source, error in ((tmp_path / 'best_checkpoint', '(config.keep_best_'
                         f'checkpoint); pass the run, {tmp_path}, for its '),
                        ('gs://b/B_16.npz', 'gs://b/B_16.npz does not exist; '
                         'a URL is never fetched: download the file first')):
    with pytest.raises(CheckpointError, match=re.escape(error)):
      reading.load(source)

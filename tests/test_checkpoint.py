"""Reading runs back: config and variables, on any device count."""

import jax
import numpy as np
import pytest

from vit_jax import checkpoint
from vit_jax import train


def test_loads_a_run_trained_on_other_devices_onto_one(trained_vit_run):
  workdir, _ = trained_vit_run
  run = checkpoint.load_run(workdir)
  assert run.epoch == 1
  assert run.config.image_size == 24
  assert run.config.model_overrides.num_layers == 2
  assert run.batch_stats == {}
  assert set(run.variables) == {'params'}
  leaves = jax.tree.leaves(run.params)
  assert {leaf.sharding.device_set.pop() for leaf in leaves} == {
      jax.devices()[0]}
  # The restored parameters drive the model they were trained as.
  model = train.create_model(run.config, num_classes=10)
  logits = model.apply(run.variables, np.zeros((2, 24, 24, 3)), train=False)
  assert logits.shape == (2, 10)
  assert np.all(np.isfinite(logits))


def test_missing_run_or_epoch_is_a_clear_error(trained_vit_run, tmp_path):
  with pytest.raises(checkpoint.CheckpointError, match='has no config.json'):
    checkpoint.load_run(tmp_path)
  workdir, _ = trained_vit_run
  with pytest.raises(checkpoint.CheckpointError,
                     match=r'No checkpoint of epoch 7 .* there are \[1\]'):
    checkpoint.load_run(workdir, epoch=7)
  (tmp_path / 'config.json').write_text('{}')
  with pytest.raises(checkpoint.CheckpointError, match='holds no checkpoint'):
    checkpoint.load_run(tmp_path)

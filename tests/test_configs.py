"""Every config file builds, for every argument, and passes its checks."""

import ast
import importlib

import jax
import numpy as np
import pytest

from tests import helpers
from vit_jax import config_schema
from vit_jax import models
from vit_jax.checkpoints import reading
from vit_jax.errors import ConfigError
from vit_jax.formats import npz
from vit_jax.training import train


def _config(spec):
  """What --config=configs/NAME.py[:ARG] builds; `spec`: NAME[:ARG]."""
  name, _, argument = spec.partition(':')
  module = importlib.import_module(f'configs.{name}')
  return module.get_config(argument) if argument else module.get_config()


@pytest.mark.parametrize('spec', [
    'cifar_small:vit', 'cifar_small:simple_cnn', 'cifar_small:small_resnet',
    'data_efficient:vit', 'data_efficient:simple_cnn',
    'data_efficient:small_resnet', 'finetune', 'finetune:imagenet2012',
    'finetune:cifar10', 'finetune:oxford_flowers102',
    'vit_pretrain:imagenet21k', 'vit_pretrain:imagenet2012', 'image_folder',
    'image_folder:simple_cnn', 'image_folder:small_resnet',
    'image_folder:finetune'
])
def test_config_is_valid(spec):
  config = _config(spec)
  if config.init_from is None:  # a fine-tuning config: refused without it
    with pytest.raises(ConfigError, match='config.init_from is unset'):
      config_schema.validate(config, num_devices=8)
    config.init_from = 'ViT-B_16.npz'
  config_schema.validate(config, num_devices=8)  # every field, no other
  models.from_config(config, num_classes=1000)


def test_configs_are_data():
  """A config file imports ml_collections, the schema and other configs."""
  allowed = {'ml_collections', 'vit_jax.config_schema', 'configs'}
  for path in (helpers.ROOT / 'configs').glob('*.py'):
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, ast.Import):
        imported.update(alias.name for alias in node.names)
      elif isinstance(node, ast.ImportFrom):
        imported.update(f'{node.module}.{alias.name}' if node.module ==
                        'vit_jax' else node.module for alias in node.names)
    assert imported <= allowed, (path.name, imported - allowed)


def test_paper_recipes_match_the_tables():
  pretrain = _config('vit_pretrain:imagenet21k')
  assert (pretrain.batch_size, pretrain.warmup_steps, pretrain.learning_rate,
          pretrain.weight_decay, pretrain.lr_decay,
          pretrain.num_epochs) == (4096, 10_000, 1e-3, 0.03, 'linear', 90)
  assert (pretrain.adam_b1, pretrain.adam_b2,
          pretrain.grad_clip_norm) == (0.9, 0.999, 1.0)
  assert pretrain.model_overrides.representation_size == 768  # Sec. 3.1
  imagenet = _config('vit_pretrain:imagenet2012')
  assert (imagenet.num_epochs, imagenet.learning_rate, imagenet.weight_decay,
          imagenet.lr_decay) == (300, 3e-3, 0.3, 'cosine')
  finetune = _config('finetune:cifar10')
  assert (finetune.optimizer, finetune.momentum, finetune.batch_size,
          finetune.weight_decay, finetune.grad_clip_norm,
          finetune.image_size) == ('sgd', 0.9, 512, 0.0, 1.0, 384)
  assert 'dropout_rate' not in finetune.model_overrides  # the model's own
  # Every paper recipe streams its dataset, as the official code does.
  assert {c.input_pipeline
          for c in (pretrain, imagenet, finetune)} == {'streaming'}
  # Table 4 counts fine-tuning in steps; Table 3 pre-training in epochs.
  assert (finetune.total_steps, finetune.warmup_steps) == (10_000, 500)
  flowers = _config('finetune:oxford_flowers102')
  assert (flowers.total_steps, flowers.warmup_steps) == (500, 50)  # decays
  assert _config('finetune:imagenet2012').total_steps == 20_000
  # The study's batch sizes nearest its numbers (experiments/small_data);
  # the data-efficiency recipes' one for every model.
  assert [
      _config(f'{name}:{model}').batch_size
      for name in ('cifar_small', 'data_efficient')
      for model in ('vit', 'simple_cnn', 'small_resnet')
  ] == [128, 64, 256, 128, 128, 128]


def test_unknown_arguments_are_refused():
  for name in ('cifar_small', 'finetune', 'vit_pretrain', 'image_folder'):
    with pytest.raises(ValueError, match='Unknown'):
      _config(f'{name}:nonexistent')


@pytest.mark.slow  # 15 s; tests/test_training_finetune.py fine-tunes .npz files
def test_the_image_folder_walkthrough_trains_from_scratch_and_fine_tunes(
    tmp_path):
  photos = tmp_path / 'photos'
  helpers.write_image_folder(
      photos, {'train': 12, 'test': 4}, draw=lambda rng, i, label: rng.integers(
          0, 256, (40 + 7 * i, 50 + 3 * label, 3), np.uint8))
  config = _config('image_folder')
  config.update(data_dir=str(photos), num_epochs=1, warmup_epochs=0,
                batch_size=8, eval_batch_size=8, cpu_devices=1)
  # 24 images, batches of 8.
  assert train.train_and_evaluate(config, tmp_path / 'scratch')['steps'] == 3
  # A released .npz: another head, a 2x2 patch grid resized to the run's
  # 4x4; 2 of the 12 layers, to compile in seconds.
  released = models.create_model('ViT-Ti_16', 21, num_layers=2)
  variables = released.init(jax.random.key(0), np.zeros((1, 32, 32, 3)),
                            train=False)
  npz.save_npz(variables['params'], tmp_path / 'ViT-Ti_16.npz')
  config = _config('image_folder:finetune')
  config.update(data_dir=str(photos), init_from=str(tmp_path / 'ViT-Ti_16.npz'),
                model='ViT-Ti_16', image_size=64, num_epochs=1, warmup_epochs=0,
                batch_size=8, eval_batch_size=8, cpu_devices=1)
  config.model_overrides.num_layers = 2
  assert train.train_and_evaluate(config, tmp_path / 'run')['steps'] == 3
  run = reading.load_run(tmp_path / 'run')
  assert run.params['head']['kernel'].shape == (192, 2)

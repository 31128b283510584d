"""Every config file builds, for every argument it documents, and passes the
checks that need no data."""

import importlib.util

import pytest

from tests.conftest import ROOT
from vit_jax import config_schema
from vit_jax import steps


def _config(name, argument=None):
  spec = importlib.util.spec_from_file_location(name,
                                                ROOT / 'configs' / f'{name}.py')
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(argument) if argument else module.get_config()


@pytest.mark.parametrize('name,argument', [
    ('cifar_small', 'vit'), ('cifar_small', 'simple_cnn'),
    ('cifar_small', 'small_resnet'), ('finetune', None),
    ('finetune', 'imagenet2012'), ('finetune', 'cifar10'),
    ('finetune', 'oxford_flowers102'), ('vit_pretrain', 'imagenet21k'),
    ('vit_pretrain', 'imagenet2012'),
])
def test_config_is_valid(name, argument):
  config = _config(name, argument)
  config_schema.validate(config, num_devices=8)
  steps.create_model(config, num_classes=1000)
  assert set(config.keys()) == set(config_schema.FIELDS)


def test_paper_recipes_match_the_tables():
  pretrain = _config('vit_pretrain', 'imagenet21k')
  assert (pretrain.batch_size, pretrain.warmup_steps, pretrain.learning_rate,
          pretrain.weight_decay, pretrain.lr_decay, pretrain.num_epochs) == (
              4096, 10_000, 1e-3, 0.03, 'linear', 90)
  assert (pretrain.adam_b1, pretrain.adam_b2, pretrain.grad_clip_norm) == (
      0.9, 0.999, 1.0)
  imagenet = _config('vit_pretrain', 'imagenet2012')
  assert (imagenet.num_epochs, imagenet.learning_rate, imagenet.weight_decay,
          imagenet.lr_decay) == (300, 3e-3, 0.3, 'cosine')
  finetune = _config('finetune', 'cifar10')
  assert (finetune.optimizer, finetune.momentum, finetune.batch_size,
          finetune.weight_decay, finetune.grad_clip_norm,
          finetune.image_size) == ('sgd', 0.9, 512, 0.0, 1.0, 384)
  # Every paper recipe streams its dataset, as the official code does.
  assert {pretrain.input_pipeline, imagenet.input_pipeline,
          finetune.input_pipeline} == {'streaming'}
  # Table 4 counts fine-tuning in steps; Table 3 pre-training in epochs.
  assert (finetune.total_steps, finetune.warmup_steps) == (10_000, 500)
  assert _config('finetune', 'oxford_flowers102').total_steps == 500
  assert _config('finetune', 'imagenet2012').total_steps == 20_000


def test_unknown_arguments_are_refused():
  for name in ('cifar_small', 'finetune', 'vit_pretrain'):
    with pytest.raises(ValueError, match='Unknown'):
      _config(name, 'nonexistent')

"""The command line: config overrides and clean errors."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _main(*flags):
  return subprocess.run(
      [sys.executable, '-m', 'vit_jax.main',
       '--config=configs/cifar_small.py', *flags],
      cwd=ROOT, capture_output=True, text=True, check=False)


def test_bad_input_is_one_clear_line_printed_once_not_a_traceback(tmp_path):
  out = _main(f'--workdir={tmp_path / "run"}', '--config.data_dir=/nonexistent',
              '--config.num_epochs=1')
  assert out.returncode == 1
  said = [line for line in out.stderr.splitlines() if '/nonexistent' in line]
  assert said == ['error: The data directory /nonexistent does not exist.']
  assert 'Traceback' not in out.stderr
  assert not (tmp_path / 'run').exists()  # nothing was written


def test_unknown_config_field_is_one_clear_line(tmp_path):
  out = _main(f'--workdir={tmp_path}', '--config.num_epoch=1')
  assert out.returncode == 1
  assert ("error: config.num_epoch is not a field of the config schema (did "
          "you mean 'num_epochs'?)") in out.stderr
  assert 'Traceback' not in out.stderr


def test_config_sets_the_cpu_device_count_and_the_flag_overrides_it(tmp_path):
  # An indivisible batch fails before any data is read, naming the count.
  out = _main(f'--workdir={tmp_path}', '--config.cpu_devices=3',
              '--config.batch_size=128')
  assert 'not divisible by the 3 devices' in out.stderr
  out = _main(f'--workdir={tmp_path}', '--config.cpu_devices=3',
              '--cpu_devices=5', '--config.batch_size=128')
  assert 'not divisible by the 5 devices' in out.stderr


def test_incomplete_cluster_flags_are_one_clear_line(tmp_path):
  out = _main(f'--workdir={tmp_path}', '--process_id=1')
  assert out.returncode == 1
  assert 'error: --process_id=1 needs --num_processes' in out.stderr
  assert 'Traceback' not in out.stderr


@pytest.mark.parametrize('config, message', [
    ('configs/cifar_small.py:vit_tiny',
     'error: --config cannot be loaded: '
     "Unknown model 'vit_tiny' for cifar_small.py; use one of vit, "
     'simple_cnn, small_resnet.'),
    ('configs/nope.py',
     'error: --config cannot be loaded: no file '
     'configs/nope.py'),
], ids=['refused argument', 'missing file'])
def test_a_config_that_cannot_load_is_one_line(tmp_path, config, message):
  out = subprocess.run(
      [sys.executable, '-m', 'vit_jax.main', f'--config={config}',
       f'--workdir={tmp_path}'],
      cwd=ROOT, capture_output=True, text=True, check=False)
  assert out.returncode == 1
  assert out.stderr.strip().splitlines()[-1] == message
  assert 'Traceback' not in out.stderr


@pytest.mark.slow  # 10 s; the typo line alone: test_models_registry.py
def test_any_model_field_can_be_overridden_and_a_typo_is_named(
    cifar10_binary, tmp_path):
  data_dir, _ = cifar10_binary
  flags = [f'--config.data_dir={data_dir}',
           '--config.train_examples_per_file=0',
           '--config.batch_size=16', '--config.eval_batch_size=16',
           '--config.test_examples=0', '--config.total_steps=1',
           '--cpu_devices=1']
  out = _main(f'--workdir={tmp_path / "typo"}',
              '--config.model_overrides.num_layerz=1', *flags)
  assert out.returncode == 1
  assert out.stderr.strip().splitlines()[-1].startswith(
      'error: ViT-Tiny-CIFAR_4 has no field(s) num_layerz. Did you mean '
      'num_layers?')
  # cifar_small.py lists only dropout_rate among the model's fields.
  out = _main(f'--workdir={tmp_path / "run"}',
              '--config.model_overrides.num_layers=1', *flags)
  assert out.returncode == 0, out.stderr[-2000:]
  assert 'ViT-Tiny-CIFAR_4 (214,538 parameters)' in out.stderr  # 1 layer

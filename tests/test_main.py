"""The command line: config overrides and clean errors."""

import json
import pathlib
import subprocess
import sys

import pytest

from tests.helpers import random_cifar
from tests.helpers import write_cifar_binary
from tests.helpers import write_process_config

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _main(*flags):
  return subprocess.run([
      sys.executable, '-m', 'vit_jax.main', '--config=configs/cifar_small.py',
      *flags
  ], cwd=ROOT, capture_output=True, text=True, check=False)


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


@pytest.mark.slow  # 10 s; the typo line alone: test_models_registry.py
def test_any_model_field_can_be_overridden_and_a_typo_is_named(
    cifar10_binary, tmp_path):
  data_dir, _ = cifar10_binary
  flags = [
      f'--config.data_dir={data_dir}', '--config.train_examples_per_file=0',
      '--config.batch_size=16', '--config.eval_batch_size=16',
      '--config.test_examples=0', '--config.total_steps=1', '--cpu_devices=1'
  ]
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


def test_the_cpu_devices_flag_is_what_the_run_records(tmp_path):
  """--cpu_devices overrides config.cpu_devices; config.json says what the
  run used, and a rerun on another count says it changed (a finished run:
  the record is written before anything trains)."""
  write_cifar_binary(
      tmp_path / 'data' / 'cifar-10-batches-bin', {
          'data_batch_1.bin': random_cifar(80, 10, seed=1),
          'test_batch.bin': random_cifar(37, 10, seed=3)
      })
  config_file = write_process_config(tmp_path, tmp_path / 'data')
  workdir = tmp_path / 'run'
  for devices in 2, 4:  # the config says 1
    out = _main_with(config_file, f'--workdir={workdir}',
                     f'--cpu_devices={devices}', '--config.total_steps=8')
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(
        (workdir / 'config.json').read_text())['cpu_devices'] == devices
    assert f'on {devices} device(s)' in out.stderr
  changes = [
      json.loads(line)
      for line in (workdir / 'config_changes.jsonl').read_text().splitlines()
  ]
  assert changes == [{
      'step': 8, 'changed': {'cpu_devices': {'before': 2, 'after': 4}}
  }]


def _main_with(config_file, *flags):
  return subprocess.run(
      [sys.executable, '-m', 'vit_jax.main', f'--config={config_file}', *flags],
      cwd=ROOT, capture_output=True, text=True, check=False)

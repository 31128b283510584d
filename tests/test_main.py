"""The command line: config overrides and clean errors."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _main(*flags):
  return subprocess.run(
      [sys.executable, '-m', 'vit_jax.main',
       '--config=configs/cifar_small.py', *flags],
      cwd=ROOT, capture_output=True, text=True, check=False)


def test_bad_input_is_one_clear_line_not_a_traceback(tmp_path):
  out = _main(f'--workdir={tmp_path}', '--config.data_dir=/nonexistent',
              '--config.num_epochs=1')
  assert out.returncode == 1
  assert 'error: Data directory /nonexistent does not exist' in out.stderr
  assert 'Traceback' not in out.stderr


def test_unknown_config_field_is_rejected(tmp_path):
  out = _main(f'--workdir={tmp_path}', '--config.num_epoch=1')
  assert out.returncode != 0
  assert 'num_epoch' in out.stderr

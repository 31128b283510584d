"""The timed steps, importable beside any other command's flags."""

import subprocess
import sys


def test_it_imports_beside_every_command_that_defines_flags():
  """Two commands that both define --model cannot share a process; the
  library they use defines no flags, so experiments import it freely."""
  process = subprocess.run([
      sys.executable, '-c', 'from vit_jax import analyze, benchmark_input\n'
      'from vit_jax.training import step_benchmark\n'
      'assert not [name for name in ("model", "batch_size")\n'
      '            if name in step_benchmark.__dict__]\n'
  ], capture_output=True, text=True, timeout=120, check=False)
  assert process.returncode == 0, process.stderr[-2000:]


def test_the_table_formats_rates_and_shares():
  from vit_jax.training import step_benchmark  # pylint: disable=g-import-not-at-top
  assert step_benchmark.format_table({
      'model': 'ViT-Ti_16', 'train_images_per_second': 1234.5,
      'train_utilization': 0.4567, 'train_ms_per_step': 3.25
  }) == ('model                    ViT-Ti_16\n'
         'train_images_per_second  1,234.5\n'
         'train_utilization        45.7%\n'
         'train_ms_per_step        3.250')

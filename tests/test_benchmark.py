"""The benchmark tool: a short run."""

import json
import subprocess
import sys



def test_command_prints_a_table_and_a_json_line():
  out = subprocess.run(
      [sys.executable, '-m', 'vit_jax.benchmark', '--model=SimpleCNN',
       '--batch_size=8', '--steps=1', '--cpu_devices=2'],
      capture_output=True, text=True, check=True)
  lines = out.stdout.strip().splitlines()
  result = json.loads(lines[-1])
  assert result['devices'] == '2 x cpu'
  assert result['train_images_per_second'] > 0
  assert 0 < result['train_utilisation'] < 1.5
  assert abs(result['xla_train_gflop_per_image'] /
             result['train_gflop_per_image'] - 1) < 0.5
  assert any(line.startswith('train_ms_per_step') for line in lines)

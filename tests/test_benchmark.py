"""The benchmark tool: a short run."""

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT


@pytest.mark.slow  # 9 s
def test_command_prints_a_table_and_a_json_line_and_writes_a_trace(tmp_path):
  out = subprocess.run([
      sys.executable, '-m', 'vit_jax.benchmark', '--model=SimpleCNN',
      '--batch_size=8', '--steps=1', '--cpu_devices=2',
      f'--trace_dir={tmp_path}', '--trace_steps=1'
  ], capture_output=True, text=True, check=True)
  lines = out.stdout.strip().splitlines()
  result = json.loads(lines[-1])
  assert result['devices'] == '2 x cpu'
  assert result['train_images_per_second'] > 0
  assert 0 < result['train_utilization'] < 1.5
  assert abs(result['xla_train_gflop_per_image'] /
             result['train_gflop_per_image'] - 1) < 0.5
  assert any(line.startswith('train_ms_per_step') for line in lines)
  # What TensorBoard and Perfetto open.
  assert list(tmp_path.rglob('*.xplane.pb'))
  assert list(tmp_path.rglob('perfetto_trace.json.gz'))
  # The program whose instructions the trace's events name.
  assert (tmp_path / 'train_steps.hlo.txt').read_text().startswith('HloModule')


@pytest.mark.slow  # 15 s
def test_memory_only_compiles_and_reports_what_one_device_holds():

  def memory(fsdp, attention):
    out = subprocess.run([
        sys.executable, '-m', 'vit_jax.benchmark', '--model=ViT-Tiny-CIFAR_4',
        '--batch_size=8', '--cpu_devices=4', f'--fsdp={fsdp}',
        f'--attention={attention}', '--memory_only'
    ], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])

  # The attention kernel changes no state, so one run also checks that the
  # fused one is chosen from the command line.
  replicated = memory(1, 'dot_product_attention')
  sharded = memory(4, 'einsum')
  assert (replicated['attention'],
          sharded['attention']) == ('dot_product_attention', 'einsum')
  assert (replicated['fsdp'], sharded['fsdp']) == (1, 4)
  assert 'train_images_per_second' not in sharded  # nothing ran
  # The state (parameters, Adam's mu and nu) is most of the arguments.
  assert (sharded['train_step_argument_mb']
          < replicated['train_step_argument_mb'] / 2.5)


def test_remat_and_scan_flags_reach_the_model_and_compile_time_is_reported():
  out = subprocess.run([
      sys.executable, '-m', 'vit_jax.benchmark', '--model=ViT-Tiny-CIFAR_4',
      '--batch_size=8', '--cpu_devices=1', '--remat=full', '--scan',
      '--memory_only'
  ], cwd=ROOT, capture_output=True, text=True, check=True)
  result = json.loads(out.stdout.strip().splitlines()[-1])
  assert (result['remat'], result['scan']) == ('full', True)
  assert 0 < result['train_compile_seconds'] < result['compile_seconds']

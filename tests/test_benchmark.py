"""The benchmark tool: a short run."""

import json

import pytest

from tests import helpers


def _benchmark(*flags) -> list[str]:
  """The lines `python -m vit_jax.benchmark` prints: a table, then JSON."""
  return helpers.run_module('vit_jax.benchmark', *flags,
                            status=0).stdout.strip().splitlines()


@pytest.mark.slow  # 9 s
def test_command_prints_a_table_and_a_json_line_and_writes_a_trace(tmp_path):
  lines = _benchmark('--model=SimpleCNN', '--batch_size=8', '--steps=1',
                     '--cpu_devices=2', f'--trace_dir={tmp_path}',
                     '--trace_steps=1')
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


def _memory(*flags) -> dict:
  return json.loads(
      _benchmark('--model=ViT-Tiny-CIFAR_4', '--batch_size=8', *flags,
                 '--memory_only')[-1])


@pytest.mark.slow  # 15 s
def test_memory_only_compiles_and_reports_what_one_device_holds():
  # The attention kernel changes no state, so one run also checks that the
  # fused one is chosen from the command line.
  replicated = _memory('--cpu_devices=4', '--fsdp=1',
                       '--attention=dot_product_attention')
  sharded = _memory('--cpu_devices=4', '--fsdp=4', '--attention=einsum')
  assert (replicated['attention'],
          sharded['attention']) == ('dot_product_attention', 'einsum')
  assert (replicated['fsdp'], sharded['fsdp']) == (1, 4)
  assert 'train_images_per_second' not in sharded  # nothing ran
  # The state (parameters, Adam's mu and nu) is most of the arguments.
  assert (sharded['train_step_argument_mb']
          < replicated['train_step_argument_mb'] / 2.5)


def test_remat_and_scan_flags_reach_the_model_and_compile_time_is_reported():
  result = _memory('--cpu_devices=1', '--remat=full', '--scan')
  assert (result['remat'], result['scan']) == ('full', True)
  assert 0 < result['train_compile_seconds'] < result['compile_seconds']


@pytest.mark.parametrize('flag,error', [
    ('--steps=0', 'flag --steps=0: 0 is not a positive integer'),
    ('--trace_dir=README.md', 'flag --trace_dir=README.md: a file, not a '
     'directory: pass a directory (made if missing)'),
])
def test_a_bad_flag_is_one_error_line_before_any_work(flag, error):
  out = helpers.run_module('vit_jax.benchmark', flag, status=1)
  assert out.stderr.splitlines() == [
      f'error: {error}; --helpshort lists the flags.'
  ]

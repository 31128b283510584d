"""experiments/benchmarks/gpu.py: one model's rows at --smoke's sizes, the
largest-batch search, the results file and README section they land in,
and (slow) the whole --smoke run."""

import dataclasses
import json
import shutil
import subprocess
import sys
import time

import jax
import pytest

from experiments import runs
from experiments.benchmarks import gpu
from experiments.benchmarks import gpu_plan
from experiments.benchmarks import gpu_report
from experiments.benchmarks import gpu_steps
from tests.conftest import random_cifar
from tests.conftest import ROOT
from tests.conftest import write_cifar_binary

SCRIPT = ROOT / 'experiments/benchmarks/gpu.py'
HERE = SCRIPT.parent


def _section(readme) -> str:
  start, end = runs.section_markers('gpu results', 'gpu.py')
  text = readme.read_text()
  return text[text.index(start) + len(start):text.index(end)].strip()


@pytest.fixture(scope='module')
def landed(tmp_path_factory):
  """(results, README copy) of ViT-B/16's rows at --smoke's sizes, timed in
  this process and landed as gpu.py lands them."""
  root = tmp_path_factory.mktemp('gpu_rows')
  readme = root / 'README.md'
  shutil.copy(HERE / 'README.md', readme)
  results = gpu.Results(root / 'gpu_results.json', readme,
                        gpu.environment(smoke=True), time.monotonic())
  peaks = {'datasheet': None, 'matmul': 1e11}
  for row in gpu_steps.compare_model('ViT-B/16', 'ViT-B_16', gpu_plan.SMOKE,
                                     peaks, None, 'no torch here'):
    results.add(row)
  results.data['finished'] = True
  results.write()
  return json.loads((root / 'gpu_results.json').read_text()), readme


def test_each_attention_and_timm_mode_is_a_row(landed):
  results, _ = landed
  steps = {(r['implementation'], r['variant']): r for r in results['rows']}
  assert list(steps) == gpu_steps.CONTENDERS
  for key in ('vit_jax', 'einsum'), ('vit_jax', 'dot_product_attention'):
    row = steps[key]
    assert row['batch_size'] == 8 and row['images_per_second'] > 0
    assert len(row['round_images_per_second']) == 2  # SMOKE's rounds
    assert row['matmul_share'] == pytest.approx(
        row['train_tflop_per_second'] * 1e12 / 1e11)
    assert row['peak_share'] is None  # no datasheet peak given
  if jax.default_backend() == 'cpu':
    assert 'cuDNN' in steps['vit_jax', 'cudnn']['skipped']
  for mode in gpu_steps.TIMM_MODES:
    assert steps['timm', mode]['skipped'] == 'no torch here'


def test_the_summary_reads_the_fastest_of_ours(landed):
  results, _ = landed
  summary = results['summary']
  assert set(summary) >= {'device', 'vit_b16_images_per_second',
                          'vit_b16_peak_share',
                          'timm_b16_best_images_per_second',
                          'study_end_to_end_seconds'}
  fastest = max((r for r in results['rows'] if 'skipped' not in r),
                key=lambda r: r['images_per_second'])
  assert (summary['vit_b16_images_per_second'],
          summary['vit_b16_attention']) == (fastest['images_per_second'],
                                            fastest['variant'])
  assert summary['device'] == jax.devices()[0].device_kind
  assert summary['timm_b16_best_images_per_second'] is None
  assert summary['study_end_to_end_seconds'] is None


def test_the_readme_section_is_the_report_and_summarize_only_rewrites_it(
    landed, tmp_path, monkeypatch):
  results, readme = landed
  section = _section(readme)
  assert section == gpu_report.report(results)
  assert '| ViT-B/16 | vit_jax einsum | 8 |' in section
  assert '| ViT-B/16 | timm eager | 8 | not measured: no torch here |' in (
      section)
  assert '| the cifar_small ViT study end to end < 60 s |  | not measured |' in (
      section)
  # The rest of the README is untouched.
  committed = (HERE / 'README.md').read_text()
  assert readme.read_text().split(section) == committed.split(
      _section(HERE / 'README.md'))

  copy = tmp_path / 'README.md'
  shutil.copy(HERE / 'README.md', copy)
  output = tmp_path / 'gpu_results.json'
  output.write_text(json.dumps(results))
  monkeypatch.setattr(sys, 'argv', [
      'gpu.py', '--summarize_only', f'--output={output}', f'--readme={copy}'])
  gpu.main()
  assert _section(copy) == section


def test_smoke_needs_its_own_output_and_readme(monkeypatch, capsys):
  monkeypatch.setattr(sys, 'argv', ['gpu.py', '--smoke'])
  with pytest.raises(SystemExit):
    gpu.main()
  assert 'give --output and --readme' in capsys.readouterr().err


def test_the_committed_readme_has_no_gpu_figure_before_a_gpu_run():
  if not (HERE / 'gpu_results.json').exists():
    assert _section(HERE / 'README.md').startswith('Not measured yet')


@pytest.mark.slow  # 30-60 s: the study's process, worker processes, compiles
def test_smoke_measures_every_section_into_json_and_readme(tmp_path):
  write_cifar_binary(tmp_path / 'data' / 'cifar-10-batches-bin', {
      'data_batch_1.bin': random_cifar(96, 10, seed=1),
      'test_batch.bin': random_cifar(37, 10, seed=3)})
  readme = tmp_path / 'README.md'
  shutil.copy(HERE / 'README.md', readme)
  output = tmp_path / 'out' / 'gpu_results.json'
  run = subprocess.run(
      [sys.executable, str(SCRIPT), '--smoke',
       f'--cifar_dir={tmp_path / "data"}', f'--output={output}',
       f'--readme={readme}'], capture_output=True, text=True, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  assert 'train step: ViT-B/16 vit_jax einsum, batch 8:' in run.stdout
  results = json.loads(output.read_text())
  assert results['finished'] and results['smoke']
  assert set(results['versions']) >= {'jax', 'cuda', 'cudnn'}
  assert results['date'] and results['matmul']['tflop_per_second'] > 0
  by_section = {}
  for row in results['rows']:
    by_section.setdefault(row['section'], []).append(row)
  [study] = by_section['study']
  assert study['end_to_end_seconds'] > study['train_seconds'] > 0
  assert results['summary']['study_end_to_end_seconds'] == (
      study['end_to_end_seconds'])
  assert [r['loader'] for r in by_section['input']] == [
      f'{results["cpus"]} threads', f'{results["cpus"]} worker processes']
  assert all(r['images_per_second'] > 0 for r in by_section['input'])
  steps = {(r['implementation'], r['variant']): r
           for r in by_section['train step']}
  assert steps['vit_jax', 'einsum']['images_per_second'] > 0
  for mode in gpu_steps.TIMM_MODES:  # measured where torch and timm import
    row = steps['timm', mode]
    assert row.get('images_per_second', 0) > 0 or 'do not import' in row[
        'skipped']
  # Skipped while the models have no remat and scan fields.
  for row in by_section['largest batch']:
    assert row.get('largest_batch', 0) > 0 or 'refuses' in row['skipped']
  section = _section(readme)
  assert section == gpu_report.report(results)
  assert '`python experiments/benchmarks/gpu.py --smoke`' in section
  assert '| total_steps=2, warmup_steps=1,' in section


def _search(fits, first=64, cap=10_000, tries_allowed=100):
  tried = []

  def recorded(batch):
    tried.append(batch)
    return fits(batch)

  result = gpu_steps.largest_fitting(
      recorded, first, cap, lambda: len(tried) < tries_allowed)
  return result, tried


def test_the_search_doubles_then_bisects_to_an_eighth():
  result, tried = _search(lambda batch: batch <= 300)
  assert tried == [64, 128, 256, 512, 384, 320, 288]
  assert result == (288, 320, True)


def test_the_search_stops_at_its_cap_at_no_fit_and_at_its_time():
  assert _search(lambda batch: True, first=2, cap=8) == (
      (8, None, True), [2, 4, 8])
  assert _search(lambda batch: False, first=4) == ((0, 1, True), [4, 2, 1])
  assert _search(lambda batch: True, tries_allowed=2) == (
      (128, None, False), [64, 128])


def test_largest_batch_catches_out_of_memory_and_times_what_fits(
    monkeypatch):
  ours = gpu_steps._ours

  def out_of_memory_above_8(plan, model, batch, **overrides):
    if batch > 8:
      raise jax.errors.JaxRuntimeError(
          'RESOURCE_EXHAUSTED: Out of memory while trying to allocate.')
    return ours(plan, model, batch, **overrides)

  monkeypatch.setattr(gpu_steps, '_ours', out_of_memory_above_8)
  # Overrides every checkout's models take, in place of remat and scan.
  monkeypatch.setattr(gpu_plan, 'LARGE_MODEL_OVERRIDES', {'dropout_rate': 0.0})
  plan = dataclasses.replace(gpu_plan.SMOKE, largest_batch_cap=64)
  row = gpu_steps.largest_batch('ViT-L/16', 'ViT-L_16', 8, plan, lambda: 60)
  assert [(t['batch_size'], t['fits']) for t in row['tries']] == [
      (8, True), (16, False), (12, False), (10, False), (9, False)]
  assert (row['largest_batch'], row['smallest_failing_batch']) == (8, 9)
  assert row['images_per_second'] == row['tries'][0]['images_per_second'] > 0
  assert 'note' not in row


def test_a_model_without_time_left_is_a_row_that_says_so():
  row = gpu_steps.largest_batch('ViT-H/14', 'ViT-H_14', 8, gpu_plan.SMOKE,
                                lambda: 0)
  assert row['skipped'] == gpu_steps.OUT_OF_TIME

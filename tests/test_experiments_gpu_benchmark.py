"""experiments/benchmarks/gpu.py's sections, results and README at --smoke."""

import dataclasses
import json
import shutil
import time
import types

import jax
import pytest

from experiments import runs
from experiments.benchmarks import gpu
from experiments.benchmarks import gpu_plan
from experiments.benchmarks import gpu_report
from experiments.benchmarks import gpu_sections
from experiments.benchmarks import hlo_parts
from experiments.benchmarks import profile_step
from experiments.benchmarks import timeline
from tests import helpers

SCRIPT = helpers.ROOT / 'experiments/benchmarks/gpu.py'
HERE = SCRIPT.parent
# --smoke's plan, the attention timed at one token multiple.
PLAN = dataclasses.replace(gpu_plan.SMOKE, token_multiples=(64,))


def _section(readme) -> str:
  start, end = runs.section_markers('gpu results', 'gpu.py')
  text = readme.read_text()
  return text[text.index(start) + len(start):text.index(end)].strip()


def _results(folder, start: float) -> gpu.Results:
  """gpu.py's results, written into `folder` beside a copy of the README."""
  shutil.copy(HERE / 'README.md', folder / 'README.md')
  return gpu.Results(folder / 'gpu_results.json', folder / 'README.md',
                     gpu.environment(smoke=True), start)


@pytest.fixture(scope='module')
def landed(tmp_path_factory):
  """(results, README copy) of ViT-B/16's and the attention's --smoke rows."""
  root = tmp_path_factory.mktemp('gpu_rows')
  results = _results(root, time.monotonic())
  peaks = {'datasheet': None, 'matmul': 1e11}
  rows = gpu_sections.compare_model(*PLAN.models[0], PLAN, peaks, None,
                                    'no torch here')
  rows += gpu_sections.attention_rows(PLAN, lambda: 60)
  results.add(*rows)
  results.data['finished'] = True
  results.write()
  return json.loads((root / 'gpu_results.json').read_text()), root / 'README.md'


def test_each_contender_and_attention_is_a_row_and_the_summary_the_fastest(
    landed):
  results, _ = landed
  steps = {(r['implementation'], r['variant']): r for r in results['rows']
           if r['section'] == 'train step'}
  assert list(steps) == gpu_sections.contenders(PLAN)
  for key in ('vit_jax', 'einsum'), ('vit_jax', 'auto'):
    row = steps[key]
    assert row['batch_size'] == 8 and row['images_per_second'] > 0
    assert len(row['round_images_per_second']) == 2  # SMOKE's rounds
    assert row['matmul_share'] == pytest.approx(row['train_tflop_per_second'] *
                                                1e12 / 1e11)
    assert row['peak_share'] is None  # no datasheet peak given
  for mode in gpu_plan.TIMM_MODES:
    assert steps['timm', mode]['skipped'] == 'no torch here'

  rows = [r for r in results['rows'] if r['section'] == 'attention']
  kernel = 'cudnn' if jax.default_backend() == 'gpu' else 'xla'
  assert [r['variant'] for r in rows] == ['einsum'] + [
      f'{kernel}, tokens padded to a multiple of {m}'
      for m in PLAN.token_multiples
  ]
  assert all(r['ms'] > 0 for r in rows)

  fastest = max(steps['vit_jax', 'einsum'], steps['vit_jax', 'auto'],
                key=lambda r: r['images_per_second'])
  assert results['summary'] == dict(
      device=jax.devices()[0].device_kind,
      vit_b16_images_per_second=fastest['images_per_second'],
      vit_b16_attention=fastest['variant'], vit_b16_batch_size=8,
      vit_b16_peak_share=None, timm_b16_best_images_per_second=None,
      timm_b16_best_mode=None, study_cold_seconds=None, study_warm_seconds=None)


def test_the_readme_section_is_the_report_and_summarize_only_rewrites_it(
    landed, tmp_path, monkeypatch, capsys):
  results, readme = landed
  section = _section(readme)
  assert section == gpu_report.report(results)
  assert '| ViT-B/16 | vit_jax einsum | 8 |' in section
  assert ('| ViT-B/16 | timm torch.compile | 8 | not measured: no torch here '
          '|') in section
  assert ('| the study end to end, cold compilation cache, < 15 s |  | not '
          'measured |') in section
  assert '| ViT-L/16 train step: >= 1.3x timm\'s best' in section
  # The rest of the README is untouched.
  committed = (HERE / 'README.md').read_text()
  assert readme.read_text().split(section) == committed.split(
      _section(HERE / 'README.md'))

  copy = shutil.copy(HERE / 'README.md', tmp_path / 'README.md')
  output = tmp_path / 'gpu_results.json'
  output.write_text(json.dumps(results))
  helpers.script_main(monkeypatch, gpu.main, 'gpu.py', '--summarize_only',
                      f'--output={output}', f'--readme={copy}')
  assert _section(copy) == section
  with pytest.raises(SystemExit):
    helpers.script_main(monkeypatch, gpu.main, 'gpu.py', '--smoke')
  assert 'give --output and --readme' in capsys.readouterr().err


def test_the_report_reads_the_whole_studies_and_each_profile(landed):
  results, _ = landed

  def study(cache, accuracy, seconds, **overrides):
    return dict(section='study', overrides=overrides, compilation_cache=cache,
                end_to_end_seconds=seconds, train_seconds=seconds / 2,
                epochs=30.0, best_test_accuracy=accuracy)

  rows = results['rows'] + [
      study('cold', 0.511, 40.0),
      study('warm', 0.505, 7.5),
      study('warm', 0.31, 20.0, steps_per_dispatch=1, num_epochs=6)
  ]
  profile = dict(
      section='profile', model='ViT-B/16', batch_size=256, step_ms=81.9,
      ms_per_step_by_kind={'matmuls': 0.25}, ms_per_step_by_model_part={
          f'part {i}': 20.0 - i for i in range(17)
      }, heaviest_kernels=[
          dict(kernel='input_reduce_fusion', kind='layer norms',
               ms_per_step=0.02, computes='LayerNorm_0, backward: reduce_sum')
      ])
  large = dict(profile, model='ViT-L/16', heaviest_kernels=[],
               ms_per_step_by_model_part='ValueError: no parts')
  section = gpu_report.report({**results, 'rows': rows + [profile, large]})
  assert ('| the study end to end, cold compilation cache, < 15 s | 40.0 s | '
          'not met |') in section
  assert ('| the study end to end, warm compilation cache, < 8 s | 7.5 s | '
          'met |') in section
  assert '| 51.1%, 50.5% | met |' in section
  assert '| part 14 | 6.00 |\n| the other 2 parts | 9.00 |' in section
  assert ('| `input_reduce_fusion` | layer norms | LayerNorm_0, backward: '
          'reduce_sum | 0.02 |') in section
  assert ('Where ViT-L/16\'s train step (batch 256, 81.9 ms untraced) spends '
          'its GPU time:\n\n| kind of work | ms per step |') in section
  assert 'By part of the model: not measured: ValueError: no parts' in section


def test_a_model_runs_when_it_fits_without_the_timm_mode_it_drops(
    monkeypatch, tmp_path):
  # ViT-B/16's rows took 100 s, 60 of them timm's slower mode's setup, which
  # the next models do without: ViT-L/16, about 40 s, fits the 50 s left;
  # ViT-Ti/16 then does not.
  now = [0.0]
  monkeypatch.setattr(gpu.time, 'monotonic', lambda: now[0])
  monkeypatch.setattr(gpu.step_benchmark, 'measure_matmul_peak',
                      lambda *args, **kwargs: 1e12)
  asked = []

  def compare_model(label, model, batch, plan, peaks, worker, missing,
                    timm_modes):
    asked.append((label, timm_modes))
    now[0] += {gpu_plan.B16: 100, gpu_plan.L16: 40}[label]
    setups = {'torch.compile': 60.0, 'compiled model, fused AdamW': 20.0}
    rate = {'torch.compile': 2.0, 'compiled model, fused AdamW': 3.0}
    bench = types.SimpleNamespace(train_flops_per_second=lambda s: 1e12)
    return [
        gpu_sections._row(label, ('timm', mode), plan, batch,
                          seconds=[1 / rate[mode]], bench=bench, peaks=peaks,
                          setup_seconds=setups[mode]) for mode in timm_modes
    ]

  monkeypatch.setattr(gpu_sections, 'compare_model', compare_model)
  plan = dataclasses.replace(
      gpu_plan.SMOKE, models=gpu_plan.VIT_MODELS,
      budgets=(('study', 0), ('train step', 150), ('attention', 0),
               ('profile', 0), ('input', 0)))
  results = _results(tmp_path, 0.0)
  # No such Python: timm's worker does not start.
  gpu.measure(plan, results, gpu.seconds_left(plan, 0.0), '/no/python')
  assert asked == [(gpu_plan.B16, tuple(gpu_plan.TIMM_MODES)),
                   (gpu_plan.L16, ('compiled model, fused AdamW',))]
  ti16 = [r for r in results.data['rows'] if r['model'] == gpu_plan.TI16]
  assert ti16 and all(r['skipped'] == gpu_sections.OUT_OF_TIME for r in ti16)
  assert [r['at_seconds'] for r in results.data['rows']][-1] == 140.0


def _kernel(name: str, ts: int, dur: int, tid: int = 7, pid: int = 2,
            **args) -> dict:
  """A trace's complete event: a kernel on the GPU's process (2), or `pid`'s."""
  return dict(ph='X', pid=pid, tid=tid, name=name, ts=ts, dur=dur,
              **({'args': args} if args else {}))


def _named(kind: str, pid: int, name: str, **tid) -> dict:
  """A trace's metadata event that names a process or (with `tid`) a thread."""
  return dict(ph='M', name=f'{kind}_name', pid=pid, **tid, args={'name': name})


# The kernels of an H100's trace that the checks name.
_GEMM = 'sm90_xmma_gemm_bf16bf16'
_NVJET = 'nvjet_sm90_tst_128x160_64x5_2x1_v_bz_NNT'
_CUDNN_DOT = 'void cudnn::fusion::compute_dot_do_o_specialized<true, 64>'
_CONV = 'sm80_xmma_fprop_implicit_gemm_indexed_bf16bf16_bf16f32_f32'

_DEVICE_TRACE = [
    _named('process', 1, '/host:CPU'),
    _named('process', 2, '/device:GPU:0'),
    _kernel('jit_train_steps', 0, 900, tid=1, pid=1),
    _kernel(_GEMM, 0, 280, hlo_op='gemm_fusion_dot.3'),
    # cuBLAS's GEMMs of CUDA 13, in a command buffer that hides the HLO op
    # (an H100's trace, 2026-11-28).
    _kernel(_NVJET, 280, 220, hlo_op='command_buffer_159'),
    _kernel('cudnn_generated_fort_native_sdpa_sm90', 500, 160),
    _kernel(_CUDNN_DOT, 660, 40),
    # The patch embedding, cuDNN's convolution (an H100's trace).
    _kernel(_CONV, 1000, 30, tid=8, hlo_op='cudnn-conv-bias-activation.3'),
    _kernel('loop_multiply_fusion', 700, 60,
            tf_op='jit(train_steps)/while/body/optimizer/mul'),
    _kernel('input_reduce_fusion', 760, 40),
    _kernel('loop_add_fusion', 800, 200, tid=8),
    # The same cuBLAS kernel again, for another matmul.
    _kernel(_GEMM, 1100, 20, tid=8, hlo_op='gemm_fusion_dot.4'),
    # A kernel XLA reused for an identical fusion, under the first one's name.
    _kernel('input_reduce_fusion', 1200, 40, tid=8,
            hlo_op='input_reduce_fusion.2'),
    # The same kernels again, as the XLA modules and ops a trace may add.
    _named('thread', 2, 'Stream #13(Compute)', tid=7),
    _named('thread', 2, 'Stream #14(Compute)', tid=8),
    _named('thread', 2, 'XLA Modules', tid=9),
    _kernel('jit_train_steps', 0, 1000, tid=9),
]


def test_a_device_trace_is_summed_by_kind_and_by_part_of_the_model():
  dense = hlo_parts.Part('Transformer/encoderblock_*/MlpBlock_0/Dense_0',
                         'forward', ('dot_general',))
  head = hlo_parts.Part('VisionTransformer._classify/head', 'backward',
                        ('dot_general',))
  norm = hlo_parts.Part('Transformer/encoderblock_*/LayerNorm_0', 'backward',
                        ('reduce_sum', 'mul'))
  # By the HLO op the trace names, by the kernel's own name, and by the jax
  # op name the trace gives (the optimizer's fusion).
  norm_1 = norm._replace(path='Transformer/encoderblock_*/LayerNorm_1')
  kinds, by_part, heaviest = profile_step.device_profile(
      _DEVICE_TRACE, 2, {
          'gemm_fusion_dot.3': dense, 'gemm_fusion_dot.4': head,
          'input_reduce_fusion': norm, 'input_reduce_fusion.2': norm_1
      })
  assert kinds == pytest.approx({
      'attention (cuDNN)': 0.1, 'convolutions': 0.015, 'matmuls': 0.26,
      'optimizer update': 0.03, 'layer norms and other reductions': 0.04,
      'copies and transposes': 0.0, 'other fusions': 0.1,
      profile_step.OTHER: 0.0, 'kernels, summed': 0.545,
      'wall, first kernel to last': 0.62
  })
  assert [k['kernel'] for k in heaviest][:2] == [_GEMM, _NVJET]
  assert heaviest[0]['args'] == {'hlo_op': 'gemm_fusion_dot.3'}
  kind = {k['kernel']: k['kind'] for k in heaviest}
  assert (kind[_NVJET], kind[_CUDNN_DOT],
          kind[_CONV]) == ('matmuls', 'attention (cuDNN)', 'convolutions')
  assert by_part == pytest.approx({
      dense.label: 0.14, hlo_parts.UNNAMED: 0.325, 'optimizer': 0.03,
      norm.label: 0.02, norm_1.label: 0.02, head.label: 0.01
  })
  assert list(by_part)[:2] == [hlo_parts.UNNAMED, dense.label]
  computes = {k['kernel']: k.get('computes') for k in heaviest}
  # A kernel that runs for several parts: the one it spends the most on.
  assert computes[_GEMM] == dense.described + ' (and 1 more)'
  assert computes['input_reduce_fusion'] == norm.described + ' (and 1 more)'
  assert computes['loop_multiply_fusion'] == 'optimizer'
  assert computes['loop_add_fusion'] is None


def test_a_profile_whose_parts_fail_keeps_its_kinds_and_says_why(monkeypatch):

  def unreadable(text):
    raise ValueError(f'no parts in {len(text)} characters')

  monkeypatch.setattr(hlo_parts, 'model_parts', unreadable)
  bench = types.SimpleNamespace(
      train_step=lambda: jax.numpy.ones(()), compiled=types.SimpleNamespace(
          train=types.SimpleNamespace(as_text=lambda: 'HloModule m')))
  profile = gpu_sections.trace_profile(bench, steps=2)
  assert profile['ms_per_step_by_kind'] == {}  # a CPU's trace: no kernels
  assert profile['ms_per_step_by_model_part'] == (
      'ValueError: no parts in 11 characters')


@pytest.mark.slow  # 30-60 s: the study's process, worker processes, compiles
def test_smoke_measures_every_section_into_json_and_readme(tmp_path):
  helpers.cifar10_release(tmp_path / 'data', 96)
  readme = tmp_path / 'README.md'
  shutil.copy(HERE / 'README.md', readme)
  output = tmp_path / 'out' / 'gpu_results.json'
  run = helpers.run_python(SCRIPT, '--smoke',
                           f'--cifar_dir={tmp_path / "data"}',
                           f'--output={output}', f'--readme={readme}', status=0)
  assert ('train step: model=ViT-B/16, implementation=vit_jax, '
          'variant=einsum, image_size=112, batch_size=8,') in run.stdout
  results = json.loads(output.read_text())
  assert results['finished'] and results['smoke']
  assert set(results['versions']) >= {'jax', 'cuda', 'cudnn'}
  assert results['date'] and results['matmul']['tflop_per_second'] > 0
  landed = [row['at_seconds'] for row in results['rows']]
  assert landed == sorted(landed) and 0 < landed[-1] <= results['seconds']
  by_section = {}
  for row in results['rows']:
    by_section.setdefault(row['section'], []).append(row)
  cold, warm, one_step = by_section['study']
  assert [r['compilation_cache']
          for r in (cold, warm, one_step)] == ['cold', 'warm', 'warm']
  assert one_step['overrides']['steps_per_dispatch'] == 1
  for study in cold, warm, one_step:
    assert study['end_to_end_seconds'] > study['train_seconds'] > 0
    assert study['train_images_per_second'] > 0
    assert study['startup_seconds']['compile'] > 0
    assert study['records'][-1]['steps'] > 0
    assert any('Compiled the train' in line for line in study['log'])
  assert any('from the compilation cache' in line
             for line in warm['log']), warm['log']
  assert results['summary']['study_cold_seconds'] == (
      cold['end_to_end_seconds'])
  assert [r['loader'] for r in by_section['input']] == [
      f'{results["cpus"]} threads', f'{results["cpus"]} worker processes'
  ]
  assert all(r['images_per_second'] > 0 for r in by_section['input'])
  steps = {(r['implementation'], r['variant']): r
           for r in by_section['train step']}
  assert steps['vit_jax', 'einsum']['images_per_second'] > 0
  for mode in gpu_plan.TIMM_MODES:  # measured where torch and timm import
    row = steps['timm', mode]
    assert row.get('images_per_second',
                   0) > 0 or 'do not import' in row['skipped']
  [profile] = by_section['profile']  # a CPU's trace has no GPU kernels
  assert 'no accelerator kernels' in profile['skipped']
  section = _section(readme)
  assert section == gpu_report.report(results)
  assert '`python experiments/benchmarks/gpu.py --smoke`' in section
  assert '| cold | total_steps=2, warmup_steps=1,' in section
  assert "Where the warm run's seconds went" in section


def test_the_timeline_of_a_run_says_where_its_seconds_went(tmp_path):
  tmp_path = tmp_path / 'run'
  helpers.finished_run(
      tmp_path, history=[{
          'step': 6 * epoch, 'epoch': float(epoch), 'seconds': 1.5,
          'phase_seconds': {'input': 0.2, 'steps': 1.0, 'other': 0.3}
      } for epoch in (1, 2)], startup_seconds={'imports': 2.0, 'compile': 5.5})
  measured = timeline.timeline(runs.read_json(tmp_path / 'summary.json'),
                               runs.history(tmp_path))
  assert measured['records'][1] == dict(epoch=2.0, seconds=1.5, input=0.2,
                                        steps=1.0, other=0.3)
  assert timeline.table(measured).splitlines() == [
      'Start-up, 7.50 s: imports 2.00, compile 5.50', '',
      '| epoch | seconds | steps | input | evaluation | checkpoint | other |',
      '|---|---|---|---|---|---|---|',
      '| 1 | 1.500 | 1.000 | 0.200 | 0.000 | 0.000 | 0.300 |',
      '| 2 | 1.500 | 1.000 | 0.200 | 0.000 | 0.000 | 0.300 |'
  ]


def test_the_timm_worker_imports_in_a_python_without_jax(tmp_path):
  """Its Python has torch and timm, not this project's libraries."""
  for name in ('jax', 'flax', 'orbax'):
    (tmp_path / name).mkdir()
    (tmp_path / name / '__init__.py').write_text('raise ImportError')
  helpers.run_python('-c', 'import experiments.benchmarks.timm_worker',
                     status=0, env={'PYTHONPATH': str(tmp_path)})

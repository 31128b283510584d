r"""One command for the GPU rows of experiments/benchmarks/README.md, in
under 9 minutes on one H100 (`--quick`: the ViT-B/16 pair and the study):

  python experiments/benchmarks/gpu.py --cifar_dir=../shared/data/cifar10-5k
  python experiments/benchmarks/gpu.py --quick --cifar_dir=...
  python experiments/benchmarks/gpu.py --summarize_only
  python experiments/benchmarks/gpu.py --smoke --cifar_dir=DIR \
      --output=/tmp/gpu/gpu_results.json --readme=/tmp/gpu/README.md

Measures, in this order, each section within its time budget
(`gpu_plan.H100`):

- the study: `python -m vit_jax.main --config=configs/cifar_small.py`
  (ViT-Tiny, 30 epochs) in a process of its own, from its start to its
  summary.json, and its training time alone (summary.json's
  train_seconds); first, while the GPU is free, with a fresh compilation
  cache ("cold"), then again with the cache it filled ("warm"), then warm
  with one train step a call (`--config.steps_per_dispatch=1`);
- a large bf16 matmul's TFLOP/s, then the train step of ViT-B/16 (batch
  256), ViT-L/16 (128) and ViT-Ti/16 (256) at 224 px in bfloat16 (or the
  largest batch below that fits), ours with the einsum attention and with
  the default ('auto': cuDNN's fused kernel on a GPU), against timm's
  VisionTransformer of the same model and batch in bf16 autocast, the whole
  step under torch.compile and the compiled model with fused AdamW (in a
  worker process under --torch_python, when torch and timm import there),
  in alternating rounds: images/s, medians, and their share of the
  datasheet's dense bf16 peak and of the matmul;
- attention alone at ViT-B/16's shape, forward and backward: the einsum
  path and the fused kernel with the tokens padded to each multiple of
  `token_multiples` (the choice of fused_attention.CUDNN_TOKEN_MULTIPLE);
- a jax.profiler trace of ViT-B/16's and ViT-L/16's steps, the kernels'
  time by kind of work (`profile_step.summarize_device`) and the heaviest;
- `vit_jax.benchmark_input` at 224 px on synthetic JPEGs, with threads and
  with one worker process per core.

Every row lands in --output (gpu_results.json beside this file: device,
versions, environment, rows, summary) and in the README's GPU section as it
completes, both written whole, so a killed run keeps what it measured.
`--summarize_only` rewrites the README's section from --output.
`--smoke` runs the same code on the CPU at tiny sizes (`gpu_plan.SMOKE`).
Meant for one GPU: our steps use every device jax sees, timm's one.
"""

import argparse
import datetime
import gc
import importlib.metadata
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

# Runs from a checkout, installed or not (on the GPU machine the project's
# dependencies come as wheels, the project itself does not).
REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

# pylint: disable=g-import-not-at-top,wrong-import-position
import jax
import jax.numpy as jnp
import numpy as np

from experiments import runs
from experiments.benchmarks import gpu_plan
from experiments.benchmarks import gpu_report
from experiments.benchmarks import gpu_steps
from experiments.benchmarks import profile_step
from experiments.benchmarks import timm_worker
from vit_jax import benchmark_input
from vit_jax.models.layers import fused_attention
from vit_jax.runtime import distributed
from vit_jax.runtime import files
from vit_jax.runtime import sharding
from vit_jax.runtime import stop_signals
from vit_jax.training import flops
from vit_jax.training import step_benchmark
# pylint: enable=g-import-not-at-top,wrong-import-position

HERE = pathlib.Path(__file__).resolve().parent
OUT_OF_TIME = gpu_steps.OUT_OF_TIME
SECTION = 'gpu results'
WRITER = 'gpu.py'
# Our process grows its GPU memory as it goes instead of taking 75% at the
# start, so that timm's worker has room beside it.
ALLOCATOR = {'XLA_PYTHON_CLIENT_PREALLOCATE': 'false',
             'XLA_PYTHON_CLIENT_MEM_FRACTION': '0.9'}


def _versions() -> dict:
  """jax's and, on a GPU, the CUDA runtime's, driver's and cuDNN's, read
  where jax's own checks read them (a private module: no public API has
  them); None where they cannot be read."""
  from jax._src import lib  # pylint: disable=g-import-not-at-top
  cuda = (getattr(lib, 'cuda_versions', None)
          if jax.default_backend() == 'gpu' else None)

  def dotted(name: str, unit: int) -> str | None:
    """CUDA's major * 1000 + minor * 10, cuDNN's major * 10000 + minor *
    100 + patch, as major.minor."""
    read = getattr(cuda, name, None)
    if read is None:
      return None
    version = read()
    return f'{version // unit}.{version % unit // (unit // 100)}'

  return {
      'python': sys.version.split()[0], 'jax': jax.__version__,
      'jaxlib': importlib.metadata.version('jaxlib'),
      'cuda': dotted('cuda_runtime_get_version', 1000),
      'cuda_driver': dotted('cuda_driver_get_version', 1000),
      'cudnn': dotted('cudnn_get_version', 10000),
  }


def environment(smoke: bool) -> dict:
  """Where and with what the run measures."""
  return {
      'date': datetime.date.today().isoformat(),
      'device': jax.devices()[0].device_kind,
      'devices': jax.device_count(),
      'cpus': len(os.sched_getaffinity(0)),
      'smoke': smoke,
      'versions': _versions(),
      # XLA's flags, the allocator's settings and the visible GPUs, as the
      # run had them.
      'environment': {k: v for k, v in sorted(os.environ.items())
                      if k.startswith(('XLA_', 'JAX_', 'TF_', 'CUDA_'))},
  }


class Results:
  """The rows so far, written whole to `output` and `readme` as each lands."""

  def __init__(self, output: pathlib.Path, readme: pathlib.Path,
               header: dict, start: float):
    self.output, self.readme, self.start = output, readme, start
    self.data = {**header, 'rows': [], 'summary': {}, 'finished': False}

  def add(self, row: dict):
    self.data['rows'].append(row)
    print(gpu_report.row_line(row), flush=True)
    self.write()

  def write(self):
    self.data['seconds'] = time.monotonic() - self.start
    self.data['summary'] = gpu_report.summary(self.data)
    self.output.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomically(self.output, json.dumps(self.data, indent=1) + '\n')
    runs.write_section(self.readme, SECTION, gpu_report.report(self.data),
                       WRITER)


class Clock:
  """Seconds left to each section: it ends by the sum of its budget and the
  earlier sections' from `start`."""

  def __init__(self, plan: gpu_plan.Plan, start: float):
    self.start = start
    ends, total = {}, start
    for section, seconds in plan.budgets:
      total += seconds
      ends[section] = total
    self.ends = ends

  def left(self, section: str) -> float:
    return self.ends[section] - time.monotonic()


def run_study(plan: gpu_plan.Plan, cifar_dir: pathlib.Path, timeout: float,
              env: dict, cache: pathlib.Path, state: str,
              overrides: dict | None = None) -> dict:
  """The study in a process of its own, its programs compiled through
  `cache` (`state`: 'cold', empty; 'warm', filled by a run before), with
  `overrides` beside the plan's."""
  overrides = {**plan.study_overrides, **(overrides or {})}
  row = {'section': 'study', 'config': 'configs/cifar_small.py',
         'overrides': overrides, 'compilation_cache': state}
  with tempfile.TemporaryDirectory() as workdir:
    start = time.time()
    try:
      run = subprocess.run(
          [sys.executable, '-m', 'vit_jax.main',
           '--config=configs/cifar_small.py', f'--workdir={workdir}',
           f'--config.data_dir={cifar_dir}',
           f'--config.compilation_cache_dir={cache}',
           *(f'--config.{k}={v}' for k, v in overrides.items())],
          cwd=REPO, env=env, capture_output=True, text=True,
          timeout=max(timeout, 1))
    except subprocess.TimeoutExpired:
      return {**row, 'skipped': f'still running at the end of its budget '
              f'({timeout:.0f} s)'}
    if run.returncode:
      last_line = (run.stderr.strip().splitlines() or [''])[-1]
      return {**row, 'skipped': f'vit_jax.main exited with {run.returncode}: '
              f'{last_line}'}
    summary_file = pathlib.Path(workdir) / 'summary.json'
    summary = json.loads(summary_file.read_text())
    # Where its start-up time went, as its log says (the lines that
    # name the phases, cut at 300 characters).
    phases = [line[:300] for line in run.stderr.splitlines()
              if any(word in line for word in (
                  'Compil', 'parameters) on', 'Resumed', 'step 39/',
                  'Done:'))]
    return {**row, 'end_to_end_seconds': summary_file.stat().st_mtime - start,
            'train_seconds': summary['train_seconds'],
            'epochs': summary['epochs'], 'steps': summary['steps'],
            'best_test_accuracy': summary['best_test_accuracy'],
            'log': phases}


# The study's runs: with a cold, then a warm compilation cache; then warm
# with one train step a call, the default before issue 47, to see what
# many steps a call (`vit_jax.dispatch`) gives on the GPU.
STUDY_RUNS = (('cold', {}), ('warm', {}),
              ('warm', {'steps_per_dispatch': 1}))


def study_rows(plan: gpu_plan.Plan, cifar_dir: pathlib.Path,
               seconds_left, env: dict) -> list[dict]:
  """The study's `STUDY_RUNS`, sharing one compilation cache."""
  rows = []
  with tempfile.TemporaryDirectory() as cache:
    for state, overrides in STUDY_RUNS:
      if seconds_left() <= 0:
        rows.append({'section': 'study', 'config': 'configs/cifar_small.py',
                     'overrides': {**plan.study_overrides, **overrides},
                     'compilation_cache': state, 'skipped': OUT_OF_TIME})
        continue
      rows.append(run_study(plan, cifar_dir, seconds_left(), env,
                            pathlib.Path(cache), state, overrides))
  return rows


def write_jpegs(folder: pathlib.Path, count: int, size: tuple[int, int]):
  """An image folder of `count` training JPEGs (and one test image) of
  `size`: 16 distinct smooth, lightly noisy images, repeated (the loader
  decodes each file anew)."""
  from PIL import Image  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  width, height = size
  encoded = []
  for i in range(16):
    coarse = rng.integers(0, 256, (height // 16 + 1, width // 16 + 1, 3),
                          np.uint8)
    smooth = np.asarray(Image.fromarray(coarse).resize(size, Image.BICUBIC))
    noisy = smooth + rng.integers(-8, 9, smooth.shape)
    path = folder / f'{i}.jpg'
    Image.fromarray(noisy.clip(0, 255).astype(np.uint8)).save(path,
                                                              quality=90)
    encoded.append(path.read_bytes())
    path.unlink()
  for split, images in (('train', count), ('test', 1)):
    (folder / split / 'a').mkdir(parents=True)
    for i in range(images):
      (folder / split / 'a' / f'{i}.jpg').write_bytes(encoded[i % 16])


def input_rows(plan: gpu_plan.Plan, seconds_left: float) -> list[dict]:
  """`benchmark_input` with threads (0) and a worker process per core
  (-1), both on all cores."""
  width, height = plan.jpeg_size
  row = {'section': 'input', 'image_size': plan.input_image_size,
         'batch_size': plan.input_batch_size,
         'source': f'{width}x{height} JPEGs to {plan.input_image_size} px, '
                   f'batch {plan.input_batch_size}'}
  if seconds_left <= 0:
    return [{**row, 'skipped': OUT_OF_TIME}]
  with tempfile.TemporaryDirectory() as folder:
    write_jpegs(pathlib.Path(folder),
                (plan.input_steps + 1) * plan.input_batch_size,
                plan.jpeg_size)
    config = benchmark_input.loader_config(
        'image_folder', folder, plan.input_batch_size,
        plan.input_image_size, plan.input_steps)
    try:
      results = benchmark_input.run_benchmark(config, plan.input_steps,
                                              [0, -1], plan.input_rounds)
    except Exception as e:  # pylint: disable=broad-except
      # The input's failure is its row's note; the GPU rows still run.
      return [{**row, 'skipped': gpu_steps.failure_note(e)}]
  return [{**row, **r} for r in results]


def start_worker(python: str) -> tuple[timm_worker.TimmWorker | None, str]:
  """The timm worker, or None and why not."""
  try:
    return timm_worker.TimmWorker(python), ''
  except (timm_worker.WorkerError, OSError) as e:
    return None, f'torch and timm do not import in {python} ({e})'


def attention_rows(plan: gpu_plan.Plan, seconds_left: float) -> list[dict]:
  """Attention alone at `plan.attention_shape`, forward and backward in
  bfloat16: the einsum path's core and the fused kernel with the tokens
  padded to each of `plan.token_multiples` (cuDNN's on a GPU, XLA's
  elsewhere), each the median of `plan.steps` calls."""
  batch, tokens, heads, head_dim = plan.attention_shape
  row = {'section': 'attention', 'shape': list(plan.attention_shape)}
  if seconds_left <= 0:
    return [{**row, 'skipped': OUT_OF_TIME}]
  kernel = 'cudnn' if fused_attention.cudnn_applies(
      jax.devices()[0], jnp.bfloat16, head_dim) else 'xla'
  q, k, v = jax.random.normal(jax.random.key(0), (3, batch, tokens, heads,
                                                  head_dim), jnp.bfloat16)
  scale = head_dim**-0.5

  def einsum(q, k, v):  # MultiHeadSelfAttention's, in its layout
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    logits = jnp.einsum('bhqe,bhke->bhqk', q * jnp.bfloat16(scale), k)
    weights = jax.nn.softmax(logits.astype(jnp.float32)).astype(q.dtype)
    return jnp.einsum('bhqk,bhke->bhqe', weights, v)

  candidates = {'einsum': einsum}
  for multiple in plan.token_multiples:
    candidates[f'{kernel}, tokens padded to a multiple of {multiple}'] = (
        lambda q, k, v, m=multiple: fused_attention.attend(
            q, k, v, scale=scale, implementation=kernel, token_multiple=m))
  rows = []
  for name, forward in candidates.items():
    step = jax.jit(jax.grad(lambda q, k, v, f=forward: f(q, k, v).astype(
        jnp.float32).sum(), argnums=(0, 1, 2)))
    try:
      seconds = step_benchmark.median_seconds(lambda: step(q, k, v),
                                              plan.steps)
    except Exception as e:  # pylint: disable=broad-except
      rows.append({**row, 'variant': name, 'skipped': gpu_steps.failure_note(e)})
      continue
    rows.append({**row, 'variant': name, 'ms': 1000 * seconds})
  return rows


def profile_rows(plan: gpu_plan.Plan, seconds_left) -> list[dict]:
  """A trace of `plan.profile_steps` train steps of the first
  `plan.profile_models` models (attention 'auto'), summed by kind of work,
  each while `seconds_left()` is positive."""
  rows = []
  for label, model, batch in plan.models[:plan.profile_models]:
    row = {'section': 'profile', 'model': label, 'batch_size': batch}
    if seconds_left() <= 0:
      rows.append({**row, 'skipped': OUT_OF_TIME})
      continue
    try:
      bench, batch = gpu_steps.fitting_ours(plan, model, batch,
                                            attention='auto')
      step = step_benchmark.median_seconds(bench.train_step, plan.steps)
      with tempfile.TemporaryDirectory() as trace_dir:
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
          for _ in range(plan.profile_steps):
            jax.block_until_ready(bench.train_step())
        trace = next(pathlib.Path(trace_dir).rglob('perfetto_trace.json.gz'))
        kinds, heaviest = profile_step.summarize_device(trace,
                                                        plan.profile_steps)
    except Exception as e:  # pylint: disable=broad-except
      rows.append({**row, 'skipped': gpu_steps.failure_note(e)})
      continue
    finally:
      bench = None
      gc.collect()
    if not kinds:
      rows.append({**row, 'skipped': 'the trace holds no accelerator '
                   'kernels (a CPU)'})
      continue
    rows.append({**row, 'batch_size': batch, 'step_ms': 1000 * step,
                 'ms_per_step_by_kind': kinds, 'heaviest_kernels': heaviest})
  return rows


def measure(plan: gpu_plan.Plan, results: Results, clock: Clock,
            torch_python: str):
  """The train-step, attention, profile and input sections, into
  `results`."""
  # The datasheet's is one device's; our step and the matmul use them all.
  per_device = flops.peak_flops(results.data['device'], 'bfloat16')
  datasheet = per_device and per_device * jax.device_count()
  matmul = step_benchmark.measure_matmul_peak(
      jnp.bfloat16, sharding.batch_sharded(sharding.make_mesh()),
      size=plan.matmul_size)
  results.data['matmul'] = {
      'size': plan.matmul_size, 'dtype': 'bfloat16',
      'tflop_per_second': matmul / 1e12,
      'datasheet_tflop_per_second': datasheet and datasheet / 1e12}
  peaks = {'datasheet': datasheet, 'matmul': matmul}
  worker, timm_missing = start_worker(torch_python)
  if worker:
    results.data['versions'].update(worker.versions)
  last, timm_modes = 0.0, tuple(gpu_steps.TIMM_MODES)
  for label, model, batch in plan.models:
    # A model's rows take about as long as the last model's did.
    if clock.left('train step') <= last:
      rows = gpu_steps.not_measured(label, plan, batch, OUT_OF_TIME,
                                    timm_modes)
    else:
      start = time.monotonic()
      rows = gpu_steps.compare_model(label, model, batch, plan, peaks, worker,
                                     timm_missing, timm_modes)
      last = time.monotonic() - start
    for row in rows:
      results.add(row)
    # timm at its best on the first model stands for it on the others.
    timm = [r for r in rows if r['implementation'] == 'timm' and
            'images_per_second' in r]
    if timm:
      timm_modes = (max(timm, key=lambda r: r['images_per_second'])[
          'variant'],)
  if worker:
    worker.close()  # its GPU memory goes back before the traces
  planned = dict(plan.budgets)  # --quick plans no time for the rest
  if planned['attention']:
    for row in attention_rows(plan, clock.left('attention')):
      results.add(row)
  if planned['profile']:
    for row in profile_rows(plan, lambda: clock.left('profile')):
      results.add(row)
  if planned['input']:
    for row in input_rows(plan, clock.left('input')):
      results.add(row)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--smoke', action='store_true',
                      help='The same code paths on the CPU at tiny sizes.')
  parser.add_argument('--quick', action='store_true',
                      help='Only the ViT-B/16 pair and the study, for when '
                      'little GPU time is left (gpu_plan.QUICK).')
  parser.add_argument('--summarize_only', action='store_true',
                      help='Only rewrite the README section from --output.')
  parser.add_argument('--output', type=pathlib.Path,
                      help='The results (default: gpu_results.json here).')
  parser.add_argument('--readme', type=pathlib.Path,
                      help='The README whose GPU section is written '
                      '(default: README.md here).')
  parser.add_argument('--cifar_dir', type=pathlib.Path,
                      default=REPO.parent / 'shared/data/cifar10-5k',
                      help='The study\'s 5k CIFAR-10 subset.')
  parser.add_argument('--torch_python', default=sys.executable,
                      help='The Python with torch and timm for timm\'s rows.')
  args = parser.parse_args()
  if args.smoke and not (args.output and args.readme):
    parser.error('--smoke measures the CPU: give --output and --readme (a '
                 'copy of this README) outside experiments/benchmarks.')
  output = args.output or HERE / 'gpu_results.json'
  readme = args.readme or HERE / 'README.md'
  if args.summarize_only:
    if not output.exists():
      sys.exit(f'error: no {output}: run gpu.py on a GPU first (README: '
               '"GPU") and copy its gpu_results.json here.')
    results = json.loads(output.read_text())
    runs.write_section(readme, SECTION, gpu_report.report(results), WRITER)
    print(gpu_report.report(results))
    return

  runs.require_cifar10_subset(args.cifar_dir)
  plan = (gpu_plan.SMOKE if args.smoke else
          gpu_plan.QUICK if args.quick else gpu_plan.H100)
  clock = Clock(plan, time.monotonic())
  study_environment = dict(os.environ)  # jax's defaults for the study
  for name, value in ALLOCATOR.items():
    os.environ.setdefault(name, value)
  distributed.set_cpu_devices(1)  # --smoke: one device, as one GPU
  if jax.default_backend() == 'cpu' and not args.smoke:
    sys.exit('error: jax sees no GPU here; on a CPU, run with --smoke.')
  results = Results(output, readme,
                    {**environment(args.smoke), 'quick': args.quick},
                    clock.start)
  results.write()
  # First, while the GPU is all but free (this process holds no memory).
  for row in study_rows(plan, args.cifar_dir.resolve(),
                        lambda: clock.left('study'), study_environment):
    results.add(row)
  measure(plan, results, clock, args.torch_python)
  results.data['finished'] = True
  results.write()
  print('\n' + gpu_report.report(results.data))


if __name__ == '__main__':
  # Each row lands in the output as it is measured; the workers it starts
  # end with their pipes.
  stop_signals.catch(at_once='stopped the GPU benchmark; its output holds '
                     'the rows measured before the signal')
  main()

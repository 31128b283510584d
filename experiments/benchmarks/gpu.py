"""One command for the GPU rows of experiments/benchmarks/README.md ("GPU")."""

import datetime
import importlib.metadata
import itertools
import json
import os
import pathlib
import sys
import time

# Runs from a checkout, installed or not (on the GPU machine the project's
# dependencies come as wheels, the project itself does not).
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))

# pylint: disable=g-import-not-at-top,wrong-import-position
import jax
import jax.numpy as jnp

from experiments import runs
from experiments.benchmarks import gpu_plan
from experiments.benchmarks import gpu_report
from experiments.benchmarks import gpu_sections
from experiments.benchmarks import study_step
from experiments.benchmarks import timm_worker
from vit_jax.runtime import distributed
from vit_jax.runtime import files
from vit_jax.runtime import sharding
from vit_jax.runtime import stop_signals
from vit_jax.training import flops
from vit_jax.training import step_benchmark
# pylint: enable=g-import-not-at-top,wrong-import-position

SECTION = 'gpu results'
WRITER = 'gpu.py'


def environment(smoke: bool) -> dict:
  """Where and with what the run measures."""
  # jax's private module: no public API has CUDA's and cuDNN's versions.
  from jax._src import lib  # pylint: disable=g-import-not-at-top
  cuda = (getattr(lib, 'cuda_versions', None)
          if jax.default_backend() == 'gpu' else None)
  versions = dict(python=sys.version.split()[0], jax=jax.__version__,
                  jaxlib=importlib.metadata.version('jaxlib'))
  units = {'cuda_runtime': 1000, 'cuda_driver': 1000, 'cudnn': 10000}
  for name, unit in units.items():
    version = getattr(cuda, f'{name}_get_version', lambda: None)()
    versions[name.removesuffix('_runtime')] = (
        version and f'{version // unit}.{version % unit // (unit // 100)}')
  # The environment: XLA's flags, the allocator's settings and the visible
  # GPUs, as the run had them.
  environ = {
      k: v for k, v in sorted(os.environ.items())
      if k.startswith(('XLA_', 'JAX_', 'TF_', 'CUDA_'))
  }
  return dict(date=datetime.date.today().isoformat(),
              device=jax.devices()[0].device_kind, devices=jax.device_count(),
              cpus=len(os.sched_getaffinity(0)), smoke=smoke, versions=versions,
              environment=environ)


class Results:
  """The rows so far, written whole to `output` and `readme` as each lands."""

  def __init__(self, output: pathlib.Path, readme: pathlib.Path, header: dict,
               start: float):
    self.output, self.readme, self.start = output, readme, start
    self.data = {**header, 'rows': [], 'summary': {}, 'finished': False}

  def add(self, *rows: dict):
    for row in rows:
      # When it landed, so that the next plan's budgets can be read off.
      row = {**row, 'at_seconds': self._seconds()}
      self.data['rows'].append(row)
      print(gpu_report.row_line(row), flush=True)
      self.write()

  def _seconds(self) -> float:
    # Rounded alike, so that no row lands after the run's total.
    return round(time.monotonic() - self.start, 1)

  def write(self):
    self.data['seconds'] = self._seconds()
    self.data['summary'] = gpu_report.summary(self.data)
    self.output.parent.mkdir(parents=True, exist_ok=True)
    files.write_atomically(self.output, json.dumps(self.data, indent=1) + '\n')
    runs.write_section(self.readme, SECTION, gpu_report.report(self.data),
                       WRITER)


def seconds_left(plan: gpu_plan.Plan, start: float):
  """A section's seconds left: it ends at its and the earlier budgets' sum."""
  sections, budgets = zip(*plan.budgets)
  ends = dict(zip(sections, itertools.accumulate(budgets)))
  return lambda section: start + ends[section] - time.monotonic()


def measure(plan: gpu_plan.Plan, results: Results, left, torch_python: str):
  """The train-step, attention, profile and input sections, into `results`."""
  # The datasheet's is one device's; our step and the matmul use them all.
  per_device = flops.peak_flops(results.data['device'], 'bfloat16')
  datasheet = per_device and per_device * jax.device_count()
  matmul = step_benchmark.measure_matmul_peak(
      jnp.bfloat16, sharding.batch_sharded(sharding.make_mesh()),
      size=plan.matmul_size)
  results.data['matmul'] = dict(
      size=plan.matmul_size, dtype='bfloat16', tflop_per_second=matmul / 1e12,
      datasheet_tflop_per_second=datasheet and datasheet / 1e12)
  peaks = {'datasheet': datasheet, 'matmul': matmul}
  try:
    worker, timm_missing = timm_worker.TimmWorker(torch_python), ''
    results.data['versions'].update(worker.versions)
  except (timm_worker.WorkerError, OSError) as e:
    worker = None
    timm_missing = f'torch and timm do not import in {torch_python} ({e})'
  last, timm_modes = 0.0, tuple(gpu_plan.TIMM_MODES)
  for label, model, batch in plan.models:
    # A model's rows take about as long as the last model's did.
    if left('train step') <= last:
      rows = gpu_sections.not_measured(label, plan, batch,
                                       gpu_sections.OUT_OF_TIME, timm_modes)
    else:
      start = time.monotonic()
      rows = gpu_sections.compare_model(label, model, batch, plan, peaks,
                                        worker, timm_missing, timm_modes)
      last = time.monotonic() - start
    results.add(*rows)
    # timm at its best on the first model stands for it on the others; the
    # next model is estimated at this one's time less the dropped modes'
    # setup (timm builds its modes one after another).
    if timm := gpu_report.measured(rows, implementation='timm'):
      best = max(timm, key=lambda r: r['images_per_second'])
      timm_modes = (best['variant'],)
      last -= sum(r['setup_seconds'] for r in timm if r is not best)
  if worker:
    worker.close()  # its GPU memory goes back before the traces
  for section, rows_of in (('attention', gpu_sections.attention_rows),
                           ('profile', gpu_sections.profile_rows),
                           ('input', gpu_sections.input_rows)):
    if dict(plan.budgets)[section]:  # --quick plans no time for the rest
      results.add(*rows_of(plan, lambda s=section: left(s)))


def main():
  parser = study_step.parser(
      __doc__, {
          'smoke': 'The same code paths on the CPU at tiny sizes.', 'quick':
              'Only the ViT-B/16 pair and the study, for when little '
              'GPU time is left (gpu_plan.QUICK).',
          'summarize_only': 'Only rewrite the README section from --output.'
      })
  parser.add_argument('--output', type=pathlib.Path,
                      help='The results (default: gpu_results.json here).')
  parser.add_argument(
      '--readme', type=pathlib.Path, help='The README whose '
      'GPU section is written (default: README.md here).')
  parser.add_argument('--cifar_dir', type=pathlib.Path,
                      default=HERE.parents[2] / 'shared/data/cifar10-5k',
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
    results = runs.read_json(output)
    runs.write_section(readme, SECTION, gpu_report.report(results), WRITER)
    print(gpu_report.report(results))
    return

  runs.require_cifar10_subset(args.cifar_dir, '--cifar_dir')
  plan = (gpu_plan.SMOKE
          if args.smoke else gpu_plan.QUICK if args.quick else gpu_plan.H100)
  left = seconds_left(plan, start := time.monotonic())
  study_environment = dict(os.environ)  # jax's defaults for the study
  # Our process grows its GPU memory as it goes instead of taking 75% at the
  # start, so that timm's worker has room beside it.
  os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
  os.environ.setdefault('XLA_PYTHON_CLIENT_MEM_FRACTION', '0.9')
  distributed.set_cpu_devices(1)  # --smoke: one device, as one GPU
  if jax.default_backend() == 'cpu' and not args.smoke:
    sys.exit('error: jax sees no GPU here; on a CPU, run with --smoke.')
  results = Results(output, readme,
                    {**environment(args.smoke), 'quick': args.quick}, start)
  results.write()
  # First, while the GPU is all but free (this process holds no memory).
  results.add(*gpu_sections.study_rows(
      plan, args.cifar_dir.resolve(), lambda: left('study'), study_environment))
  measure(plan, results, left, args.torch_python)
  results.data['finished'] = True
  results.write()
  print('\n' + gpu_report.report(results.data))


if __name__ == '__main__':
  # Each row lands in the output as it is measured; the workers it starts
  # end with their pipes.
  stop_signals.catch(at_once='stopped the GPU benchmark; its output holds '
                     'the rows measured before the signal')
  main()

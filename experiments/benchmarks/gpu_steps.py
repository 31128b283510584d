"""`gpu.py`'s train-step rows: ours with each attention against timm's."""

import gc
import statistics
import traceback

import jax

from experiments.benchmarks import gpu_plan
from experiments.benchmarks import study_step
from experiments.benchmarks import timm_worker
from vit_jax import errors
from vit_jax.training import step_benchmark

TIMM_MODES = gpu_plan.TIMM_MODES
OUT_OF_TIME = 'not run: its section\'s time budget was spent'


def failure_note(error: Exception) -> str:
  """A failed row's note, the error's first line; its traceback to stderr."""
  traceback.print_exception(error)
  return errors.first_line(error)


def _ours(plan: gpu_plan.Plan, model: str, batch: int,
          **overrides) -> step_benchmark.StepBenchmark:
  """Our train step in bfloat16, unaugmented, run once: out of memory shows."""
  config = step_benchmark.benchmark_config(
      model, batch, plan.image_size, 'bfloat16', augment=False,
      **{**plan.model_overrides, **overrides})
  bench = step_benchmark.StepBenchmark(config, plan.num_classes, evaluate=False)
  jax.block_until_ready(bench.train_step())
  return bench


def fitting_ours(plan: gpu_plan.Plan, model: str, batch: int,
                 **overrides) -> tuple[step_benchmark.StepBenchmark, int]:
  """Our step (`_ours`) at `batch`, halved while it runs out of memory."""
  while True:
    try:
      return _ours(plan, model, batch, **overrides), batch
    except jax.errors.JaxRuntimeError as e:
      if batch == 1 or not ('RESOURCE_EXHAUSTED' in str(e) or
                            'out of memory' in str(e).lower()):
        raise
    batch //= 2
    gc.collect()


def architecture(bench: step_benchmark.StepBenchmark) -> dict:
  """Our model as timm's VisionTransformer is configured for it."""
  m = bench.module
  return timm_worker.Architecture(
      image=bench.config.image_size, patch=m.patch_size, hidden=m.hidden_size,
      layers=m.num_layers, heads=m.num_heads, mlp=m.mlp_dim,
      classes=m.num_classes, dropout=m.dropout_rate,
      parameters=sum(x.size
                     for x in jax.tree.leaves(bench.state.params)))._asdict()


def contenders(
    plan: gpu_plan.Plan, timm_modes=tuple(TIMM_MODES)) -> list[tuple[str, str]]:
  """The rows of a model: (implementation, variant)."""
  return ([('vit_jax', name)
           for name in plan.attentions] + [('timm', mode)
                                           for mode in timm_modes])


def not_measured(label: str, plan: gpu_plan.Plan, batch: int, reason: str,
                 timm_modes=tuple(TIMM_MODES)) -> list[dict]:
  return [
      _row(label, key, plan, batch, skipped=reason)
      for key in contenders(plan, timm_modes)
  ]


def compare_model(
    label: str, model: str, batch_size: int, plan: gpu_plan.Plan, peaks: dict,
    worker: timm_worker.TimmWorker | None, timm_missing: str,
    timm_modes=tuple(TIMM_MODES)) -> list[dict]:
  """`model`'s rows, each attention's and `timm_modes`', at a fitting batch."""
  first, *others = plan.attentions
  keys = contenders(plan, timm_modes)
  skipped = {} if worker else {('timm', mode): timm_missing
                               for mode in timm_modes}
  try:
    bench, batch = fitting_ours(plan, model, batch_size, attention=first)
  except Exception as e:  # pylint: disable=broad-except
    # One model's failure is its rows' note; the other models still run.
    return not_measured(label, plan, batch_size, failure_note(e), timm_modes)
  if worker:
    # The worker builds and compiles timm's steps while we compile ours.
    for mode in timm_modes:
      worker.send(op='prepare', name=mode, architecture=architecture(bench),
                  batch=batch, compiled=TIMM_MODES[mode], dtype='bfloat16')
  benches = {first: bench}
  for name in others:
    try:
      benches[name] = _ours(plan, model, batch, attention=name)
    except Exception as e:  # pylint: disable=broad-except
      # Out of memory, or a kernel this device lacks.
      skipped['vit_jax', name] = failure_note(e)
  # Ours: compiling; timm's: building, compiling and its first 3 steps.
  setup = {('vit_jax', name): b.compile_seconds for name, b in benches.items()}
  if worker:
    for mode in timm_modes:
      try:
        setup['timm', mode] = worker.receive()['warmup_seconds']
      except timm_worker.WorkerError as e:
        skipped['timm', mode] = str(e)

  def time_round(key) -> float:
    implementation, name = key
    if implementation == 'vit_jax':
      return step_benchmark.median_seconds(benches[name].train_step, plan.steps)
    worker.send(op='time', name=name, steps=plan.steps)
    return statistics.median(worker.receive()['seconds'])

  seconds = {key: [] for key in keys if key in setup}
  for _, key in study_step.rounds(seconds, plan.rounds):
    if key not in skipped:
      try:
        seconds[key].append(time_round(key))
      except timm_worker.WorkerError as e:
        skipped[key] = str(e)
  if worker:
    try:
      worker.send(op='clear')
      worker.receive()
    except timm_worker.WorkerError:
      pass  # it ended: its rows say so
  return [
      _row(label, key, plan, batch, skipped=skipped[key]) if key in skipped else
      _row(label, key, plan, batch, seconds=seconds[key], bench=bench,
           peaks=peaks, setup_seconds=setup[key]) for key in keys
  ]


def _row(label: str, key: tuple[str, str], plan: gpu_plan.Plan, batch: int,
         skipped: str = '', seconds: list[float] = (),
         bench: step_benchmark.StepBenchmark | None = None,
         peaks: dict | None = None, setup_seconds: float = 0) -> dict:
  implementation, variant = key
  row = {
      'section': 'train step', 'model': label, 'implementation': implementation,
      'variant': variant, 'image_size': plan.image_size, 'batch_size': batch
  }
  if skipped:
    return {**row, 'skipped': skipped}
  step = statistics.median(seconds)
  flop_per_second = bench.train_flops_per_second(step)
  return {
      **row, 'images_per_second': batch / step, 'ms_per_step': 1000 * step,
      'round_images_per_second': [batch / s for s in seconds],
      'train_tflop_per_second': flop_per_second / 1e12, 'peak_share':
          (flop_per_second / peaks['datasheet'] if peaks['datasheet'] else None
          ), 'matmul_share': flop_per_second / peaks['matmul'],
      'setup_seconds': setup_seconds,
  }

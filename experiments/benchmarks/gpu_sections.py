"""What `gpu.py` measures: a function a section, ours against timm's step."""

import contextlib
import gc
import pathlib
import statistics
import tempfile
import traceback
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np

from experiments.benchmarks import gpu_plan
from experiments.benchmarks import hlo_parts
from experiments.benchmarks import profile_step
from experiments.benchmarks import study_step
from experiments.benchmarks import timeline
from experiments.benchmarks import timm_worker
from vit_jax import errors
from vit_jax import benchmark_input
from vit_jax.models.layers import attention
from vit_jax.models.layers import fused_attention
from vit_jax.training import step_benchmark

OUT_OF_TIME = 'not run: its section\'s time budget was spent'


def failure_note(error: Exception) -> str:
  """A failed row's note, the error's first line; its traceback to stderr."""
  traceback.print_exception(error)
  return errors.first_line(error)


def fitting_ours(plan: gpu_plan.Plan, model: str, batch: int, halve=True,
                 **overrides) -> tuple[step_benchmark.StepBenchmark, int]:
  """Our bf16 step, unaugmented, run once; if `halve`, `batch` halved on OOM."""
  config = step_benchmark.benchmark_config(
      model, batch, plan.image_size, 'bfloat16', augment=False,
      **{**plan.model_overrides, **overrides})
  try:
    bench = step_benchmark.StepBenchmark(config, plan.num_classes,
                                         evaluate=False)
    jax.block_until_ready(bench.train_step())
    return bench, batch
  except jax.errors.JaxRuntimeError as e:
    if not halve or batch == 1 or not ('RESOURCE_EXHAUSTED' in str(e) or
                                       'out of memory' in str(e).lower()):
      raise
    bench = None  # its memory, freed before the smaller batch is tried
  gc.collect()
  return fitting_ours(plan, model, batch // 2, halve, **overrides)


def contenders(
    plan: gpu_plan.Plan, timm_modes=tuple(gpu_plan.TIMM_MODES)
) -> list[tuple[str, str]]:
  """The rows of a model: (implementation, variant)."""
  return [('vit_jax', a) for a in plan.attentions] + [('timm', mode)
                                                      for mode in timm_modes]


def not_measured(label: str, plan: gpu_plan.Plan, batch: int, reason: str,
                 timm_modes) -> list[dict]:
  keys = contenders(plan, timm_modes)
  return [_row(label, key, plan, batch, skipped=reason) for key in keys]


def compare_model(
    label: str, model: str, batch_size: int, plan: gpu_plan.Plan, peaks: dict,
    worker: timm_worker.TimmWorker | None, timm_missing: str,
    timm_modes=tuple(gpu_plan.TIMM_MODES)) -> list[dict]:
  """`model`'s rows, each attention's and `timm_modes`', at a fitting batch."""
  first, *others = plan.attentions
  keys = contenders(plan, timm_modes)
  skipped = {} if worker else {('timm', m): timm_missing for m in timm_modes}
  try:
    bench, batch = fitting_ours(plan, model, batch_size, attention=first)
  except Exception as e:  # pylint: disable=broad-except
    # One model's failure is its rows' note; the other models still run.
    return not_measured(label, plan, batch_size, failure_note(e), timm_modes)
  if worker:
    # The worker builds and compiles timm's steps, of our ViT's sizes, while
    # we compile ours.
    m = bench.module
    architecture = dict(
        image=bench.config.image_size, patch=m.patch_size, hidden=m.hidden_size,
        layers=m.num_layers, heads=m.num_heads, mlp=m.mlp_dim,
        classes=m.num_classes, dropout=m.dropout_rate,
        parameters=sum(x.size for x in jax.tree.leaves(bench.state.params)))
    for mode in timm_modes:
      worker.send(op='prepare', name=mode, architecture=architecture,
                  batch=batch, compiled=gpu_plan.TIMM_MODES[mode],
                  dtype='bfloat16')
  benches = {first: bench}
  for name in others:
    try:
      benches[name], _ = fitting_ours(plan, model, batch, halve=False,
                                      attention=name)
    except Exception as e:  # pylint: disable=broad-except
      # Out of memory, or a kernel this device lacks.
      skipped['vit_jax', name] = failure_note(e)
  # Ours: compiling; timm's: building, compiling and its first 3 steps.
  setup = {('vit_jax', name): b.compile_seconds for name, b in benches.items()}
  for mode in timm_modes if worker else ():
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
    with contextlib.suppress(timm_worker.WorkerError):  # its rows say so
      worker.send(op='clear')
      worker.receive()
  # A key without a setup is skipped: its seconds and setup are never read.
  return [
      _row(label, key, plan, batch, skipped.get(key, ''), seconds.get(key),
           bench, peaks, setup.get(key)) for key in keys
  ]


def _row(label: str, key: tuple[str, str], plan: gpu_plan.Plan, batch: int,
         skipped: str = '', seconds: list[float] = (), bench=None,
         peaks: dict | None = None, setup_seconds: float = 0) -> dict:
  row = dict(section='train step', model=label, implementation=key[0],
             variant=key[1], image_size=plan.image_size, batch_size=batch)
  if skipped:
    return {**row, 'skipped': skipped}
  step = statistics.median(seconds)
  flop_per_second = bench.train_flops_per_second(step)
  datasheet = peaks['datasheet']
  return dict(row, images_per_second=batch / step,
              ms_per_step=1000 * step, round_images_per_second=[
                  batch / s for s in seconds
              ], train_tflop_per_second=flop_per_second / 1e12,
              peak_share=flop_per_second / datasheet if datasheet else None,
              matmul_share=flop_per_second / peaks['matmul'],
              setup_seconds=setup_seconds)


def run_study(plan: gpu_plan.Plan, cifar_dir: pathlib.Path, timeout: float,
              env: dict, cache: str, state: str, overrides: dict) -> dict:
  """The study in a process of its own, its `cache` 'cold' (empty) or 'warm'."""
  overrides = {**plan.study_overrides, **overrides}
  row = dict(section='study', config='configs/cifar_small.py',
             overrides=overrides, compilation_cache=state)
  if timeout <= 0:
    return {**row, 'skipped': OUT_OF_TIME}
  run = study_step.run_study(cifar_dir,
                             {'compilation_cache_dir': cache, **overrides},
                             timeout, env)
  if 'failed' in run:
    return {**row, 'skipped': f'vit_jax.main: {run["failed"]}'}
  summary, records = run['summary'], run['records']
  # The log lines that say what was compiled or read from the cache,
  # resumed and finished (cut at 300 characters); the timeline below says
  # where the seconds went.
  phases = [
      line[:300] for line in run['stderr'].splitlines()
      if any(word in line for word in ('Compil', 'parameters) on', 'Resumed',
                                       'step 39/', 'Done:'))
  ]
  # Its pace in training alone (a record's images/s leaves out evaluating
  # and saving), to set runs of other lengths side by side.
  pace = statistics.median(r['images_per_second'] for r in records
                           if 'images_per_second' in r)
  return dict(row, end_to_end_seconds=run['seconds'],
              train_seconds=summary['train_seconds'],
              train_images_per_second=pace, epochs=summary['epochs'],
              steps=summary['steps'],
              best_test_accuracy=summary['best_test_accuracy'], log=phases,
              **timeline.timeline(summary, records))


# The study with a cold, then a warm compilation cache; then 6 epochs warm
# with one train step a call: its images/s in training against the warm
# run's is what many steps a call (`vit_jax.dispatch`) gives on the GPU.
STUDY_RUNS = (('cold', {}), ('warm', {}),
              ('warm', {'steps_per_dispatch': 1, 'num_epochs': 6}))


def study_rows(plan: gpu_plan.Plan, cifar_dir: pathlib.Path, seconds_left,
               env: dict) -> list[dict]:
  """The study's `STUDY_RUNS`, sharing one compilation cache."""
  with tempfile.TemporaryDirectory() as cache:
    return [
        run_study(plan, cifar_dir, seconds_left(), env, cache, *r)
        for r in STUDY_RUNS
    ]


def write_jpegs(folder: pathlib.Path, count: int, size: tuple[int, int]):
  """A folder of `count` training JPEGs and two test ones: 16 images repeated."""
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
    Image.fromarray(noisy.clip(0, 255).astype(np.uint8)).save(path, quality=90)
    encoded.append(path.read_bytes())
    path.unlink()
  for split, images in (('train', count), ('test', 2)):
    for i in range(images):  # two classes: a folder of one is refused
      path = folder / split / 'ab'[i % 2] / f'{i}.jpg'
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_bytes(encoded[i % 16])


def input_rows(plan: gpu_plan.Plan, seconds_left) -> list[dict]:
  """`benchmark_input` with threads (0) and a worker process per core (-1)."""
  width, height = plan.jpeg_size
  row = dict(
      section='input', image_size=plan.input_image_size,
      batch_size=plan.input_batch_size,
      source=f'{width}x{height} JPEGs to {plan.input_image_size} px, '
      f'batch {plan.input_batch_size}')
  if seconds_left() <= 0:
    return [{**row, 'skipped': OUT_OF_TIME}]
  with tempfile.TemporaryDirectory() as folder:
    write_jpegs(pathlib.Path(folder),
                (plan.input_steps + 1) * plan.input_batch_size, plan.jpeg_size)
    config = benchmark_input.loader_config(
        'image_folder', folder, plan.input_batch_size, plan.input_image_size,
        plan.input_steps)
    try:
      results = benchmark_input.run_benchmark(config, plan.input_steps, [0, -1],
                                              plan.input_rounds)
    except Exception as e:  # pylint: disable=broad-except
      # The input's failure is its row's note; the GPU rows still run.
      return [{**row, 'skipped': failure_note(e)}]
  return [{**row, **r} for r in results]


def attention_rows(plan: gpu_plan.Plan, seconds_left) -> list[dict]:
  """The attention layer in bf16: einsum, and fused at each token multiple."""
  batch, tokens, heads, head_dim = plan.attention_shape
  row = dict(section='attention', shape=list(plan.attention_shape), layer=True)
  if seconds_left() <= 0:
    return [{**row, 'skipped': OUT_OF_TIME}]
  kernel = 'cudnn' if fused_attention.cudnn_applies(
      jax.devices()[0], jnp.bfloat16, head_dim) else 'xla'
  x = jax.random.normal(jax.random.key(0), (batch, tokens, heads * head_dim),
                        jnp.bfloat16)
  # 'cudnn' runs `kernel` at each token multiple (KERNELS patched).
  candidates = {'einsum': ('einsum', {})} | {
      f'{kernel}, tokens padded to a multiple of {m}':
          ('cudnn', {'cudnn': (kernel, m)}) for m in plan.token_multiples
  }
  rows = []
  for name, (implementation, kernels) in candidates.items():
    layer = attention.MultiHeadSelfAttention(heads, dtype=jnp.bfloat16,
                                             attention=implementation)

    def loss(params, x, apply=layer.apply):
      return apply(params, x, deterministic=True).astype(jnp.float32).sum()

    step = jax.jit(jax.grad(loss, argnums=(0, 1)))
    rows.append({**row, 'variant': name})
    try:
      with mock.patch.dict(fused_attention.KERNELS, kernels):
        params = layer.init(jax.random.key(1), x, deterministic=True)
        rows[-1]['ms'] = 1000 * step_benchmark.median_seconds(
            lambda: step(params, x), plan.steps)
    except Exception as e:  # pylint: disable=broad-except
      rows[-1]['skipped'] = failure_note(e)
  return rows


def trace_profile(bench: step_benchmark.StepBenchmark, steps: int) -> dict:
  """`profile_step.device_profile` of `steps` steps (no kinds on a CPU)."""
  with tempfile.TemporaryDirectory() as trace_dir:
    step_benchmark.trace(bench, trace_dir, steps)
    events = profile_step.trace_events(pathlib.Path(trace_dir))
    failed = None
    try:
      parts = hlo_parts.model_parts(bench.compiled.train.as_text())
    except Exception as e:  # pylint: disable=broad-except
      # Without it, the kinds of work are still measured.
      parts, failed = {}, failure_note(e)
    kinds, by_part, heaviest = profile_step.device_profile(events, steps, parts)
  return dict(ms_per_step_by_kind=kinds, ms_per_step_by_model_part=failed or
              by_part, heaviest_kernels=heaviest)


def profile_rows(plan: gpu_plan.Plan, seconds_left) -> list[dict]:
  """`trace_profile` of the first `plan.profile_models` models' steps."""
  rows = []
  for label, model, batch in plan.models[:plan.profile_models]:
    rows.append({'section': 'profile', 'model': label, 'batch_size': batch})
    if seconds_left() <= 0:
      rows[-1]['skipped'] = OUT_OF_TIME
      continue
    try:
      bench, batch = fitting_ours(plan, model, batch, attention='auto')
      step = step_benchmark.median_seconds(bench.train_step, plan.steps)
      profile = trace_profile(bench, plan.profile_steps)
      if not profile['ms_per_step_by_kind']:
        profile = {'skipped': 'the trace holds no accelerator kernels (a CPU)'}
      rows[-1].update(batch_size=batch, step_ms=1000 * step, **profile)
    except Exception as e:  # pylint: disable=broad-except
      rows[-1]['skipped'] = failure_note(e)
    finally:
      bench = None
      gc.collect()
  return rows

"""The sections `gpu.py` measures besides the train step's, each a function."""

import gc
import pathlib
import statistics
import tempfile
import time
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np

from experiments import runs
from experiments.benchmarks import gpu_plan
from experiments.benchmarks import gpu_steps
from experiments.benchmarks import hlo_parts
from experiments.benchmarks import profile_step
from experiments.benchmarks import study_step
from experiments.benchmarks import timeline
from vit_jax import benchmark_input
from vit_jax.models.layers import attention
from vit_jax.models.layers import fused_attention
from vit_jax.training import step_benchmark


def run_study(plan: gpu_plan.Plan, cifar_dir: pathlib.Path, timeout: float,
              env: dict, cache: pathlib.Path, state: str,
              overrides: dict | None = None) -> dict:
  """The study in a process of its own, its `cache` 'cold' (empty) or 'warm'."""
  overrides = {**plan.study_overrides, **(overrides or {})}
  row = {
      'section': 'study', 'config': 'configs/cifar_small.py',
      'overrides': overrides, 'compilation_cache': state
  }
  if timeout <= 0:
    return {**row, 'skipped': gpu_steps.OUT_OF_TIME}
  with tempfile.TemporaryDirectory() as workdir:
    start = time.time()
    _, stderr, failed = study_step.run(
        study_step.study_command(workdir, cifar_dir,
                                 {'compilation_cache_dir': cache, **overrides}),
        timeout, env)
    if failed:
      return {**row, 'skipped': f'vit_jax.main: {failed}'}
    summary_file = pathlib.Path(workdir) / 'summary.json'
    summary = runs.read_json(summary_file)
    records = runs.history(pathlib.Path(workdir))
    # The log lines that say what was compiled or read from the cache,
    # resumed and finished (cut at 300 characters); the timeline below says
    # where the seconds went.
    phases = [
        line[:300] for line in stderr.splitlines()
        if any(word in line for word in ('Compil', 'parameters) on', 'Resumed',
                                         'step 39/', 'Done:'))
    ]
    # Its pace in training alone (a record's images/s leaves out evaluating
    # and saving), to set runs of other lengths side by side.
    pace = statistics.median(r['images_per_second'] for r in records
                             if 'images_per_second' in r)
    return {
        **row, 'end_to_end_seconds': summary_file.stat().st_mtime - start,
        'train_seconds': summary['train_seconds'],
        'train_images_per_second': pace, 'epochs': summary['epochs'],
        'steps': summary['steps'], 'best_test_accuracy':
            summary['best_test_accuracy'], 'log': phases, **timeline.timeline(
                summary, records)
    }


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
        run_study(plan, cifar_dir, seconds_left(), env, pathlib.Path(cache),
                  state, overrides) for state, overrides in STUDY_RUNS
    ]


def write_jpegs(folder: pathlib.Path, count: int, size: tuple[int, int]):
  """A folder of `count` training JPEGs and a test one: 16 images repeated."""
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
  for split, images in (('train', count), ('test', 1)):
    (folder / split / 'a').mkdir(parents=True)
    for i in range(images):
      (folder / split / 'a' / f'{i}.jpg').write_bytes(encoded[i % 16])


def input_rows(plan: gpu_plan.Plan, seconds_left) -> list[dict]:
  """`benchmark_input` with threads (0) and a worker process per core (-1)."""
  width, height = plan.jpeg_size
  row = {
      'section': 'input', 'image_size': plan.input_image_size,
      'batch_size': plan.input_batch_size,
      'source': f'{width}x{height} JPEGs to {plan.input_image_size} px, '
                f'batch {plan.input_batch_size}'
  }
  if seconds_left() <= 0:
    return [{**row, 'skipped': gpu_steps.OUT_OF_TIME}]
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
      return [{**row, 'skipped': gpu_steps.failure_note(e)}]
  return [{**row, **r} for r in results]


def attention_rows(plan: gpu_plan.Plan, seconds_left) -> list[dict]:
  """The attention layer in bf16: einsum, and fused at each token multiple."""
  batch, tokens, heads, head_dim = plan.attention_shape
  row = {
      'section': 'attention', 'shape': list(plan.attention_shape), 'layer': True
  }
  if seconds_left() <= 0:
    return [{**row, 'skipped': gpu_steps.OUT_OF_TIME}]
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
    step = jax.jit(
        jax.grad(
            lambda p, x, f=layer.apply: f(p, x, deterministic=True).astype(
                jnp.float32).sum(), argnums=(0, 1)))
    try:
      with mock.patch.dict(fused_attention.KERNELS, kernels):
        params = layer.init(jax.random.key(1), x, deterministic=True)
        seconds = step_benchmark.median_seconds(lambda: step(params, x),
                                                plan.steps)
    except Exception as e:  # pylint: disable=broad-except
      rows.append(
          {**row, 'variant': name, 'skipped': gpu_steps.failure_note(e)})
      continue
    rows.append({**row, 'variant': name, 'ms': 1000 * seconds})
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
      parts, failed = {}, gpu_steps.failure_note(e)
    kinds, by_part, heaviest = profile_step.device_profile(events, steps, parts)
  return {
      'ms_per_step_by_kind': kinds,
      'ms_per_step_by_model_part': failed or by_part,
      'heaviest_kernels': heaviest
  }


def profile_rows(plan: gpu_plan.Plan, seconds_left) -> list[dict]:
  """`trace_profile` of the first `plan.profile_models` models' steps."""
  rows = []
  for label, model, batch in plan.models[:plan.profile_models]:
    row = {'section': 'profile', 'model': label, 'batch_size': batch}
    if seconds_left() <= 0:
      rows.append({**row, 'skipped': gpu_steps.OUT_OF_TIME})
      continue
    try:
      bench, batch = gpu_steps.fitting_ours(plan, model, batch,
                                            attention='auto')
      step = step_benchmark.median_seconds(bench.train_step, plan.steps)
      profile = trace_profile(bench, plan.profile_steps)
    except Exception as e:  # pylint: disable=broad-except
      rows.append({**row, 'skipped': gpu_steps.failure_note(e)})
      continue
    finally:
      bench = None
      gc.collect()
    if not profile['ms_per_step_by_kind']:
      profile = {'skipped': 'the trace holds no accelerator kernels (a CPU)'}
    rows.append({**row, 'batch_size': batch, 'step_ms': 1000 * step, **profile})
  return rows

"""The training loop's steps timed on synthetic images (`vit_jax.benchmark`)."""

import dataclasses
import functools
import gc
import pathlib
import time
import timeit
from typing import Any

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vit_jax import config_schema
from vit_jax import data
from vit_jax import models
from vit_jax.data import sources
from vit_jax.runtime import sharding
from vit_jax.training import flops
from vit_jax.training import optimizer
from vit_jax.training import steps

# The side of the matmul whose FLOP/s a step's utilization is measured
# against.
_PEAK_MATMUL_SIZE = 2048
# The traced train step's optimized HLO, written beside a trace.
TRACED_PROGRAM = 'train_steps.hlo.txt'
# A benchmark sets a ViT's fields only where they differ, so that a CNN runs.
_VIT_DEFAULTS = {
    f.name: f.default for f in dataclasses.fields(models.VisionTransformer)
}


def measure_matmul_peak(
    dtype, placement: jax.sharding.NamedSharding, compiler_options=None,
    size: int | tuple[int, int, int] = _PEAK_MATMUL_SIZE) -> float:
  """FLOP/s of a (M, K, N) or square matmul of random data on each device."""
  m, k, n = (size,) * 3 if isinstance(size, int) else size
  num_devices = placement.mesh.size
  # Random data: a GPU multiplies zeros or constants faster.
  a_key, b_key = jax.random.split(jax.random.key(0))
  a = jax.device_put(jax.random.normal(a_key, (num_devices * m, k), dtype),
                     placement)
  b = jax.random.normal(b_key, (k, n), dtype)
  matmul = jax.jit(lambda a, b: a @ b).lower(a, b).compile(compiler_options)
  seconds = median_seconds(lambda: matmul(a, b), steps=5)
  return 2 * num_devices * m * k * n / seconds


def median_seconds(run, steps: int, warmup: int = 2) -> float:
  """The median seconds of `steps` waited-for calls of `run` after `warmup`."""
  # With the garbage collector on, as in a training loop.
  times = timeit.repeat(lambda: jax.block_until_ready(run()), gc.enable,
                        number=1, repeat=warmup + steps)
  return float(np.median(times[warmup:]))


def _memory_mb(compiled) -> dict[str, float]:
  """XLA's estimate of one device's memory while the step runs."""
  if (analysis := compiled.memory_analysis()) is None:
    return {}
  total = (analysis.argument_size_in_bytes + analysis.output_size_in_bytes +
           analysis.temp_size_in_bytes - analysis.alias_size_in_bytes)
  return dict(train_step_argument_mb=analysis.argument_size_in_bytes / 2**20,
              train_step_temp_mb=analysis.temp_size_in_bytes / 2**20,
              train_step_memory_mb=total / 2**20)


def benchmark_config(model: str, batch_size: int, image_size: int,
                     dtype: str = 'float32', augment: bool = True,
                     cpu_compiler_options: dict[str, str] | None = None,
                     fsdp: int = 1, steps_per_dispatch: int = 1,
                     **model_overrides) -> ml_collections.ConfigDict:
  """The schema's config with the study's optimizer and loss."""
  config = config_schema.defaults(
      model=model, dtype=dtype, batch_size=batch_size,
      eval_batch_size=batch_size, image_size=image_size, augment=augment,
      pixel_std=(0.25, 0.25, 0.25), label_smoothing=0.1, weight_decay=0.01,
      total_steps=1, fsdp=fsdp, steps_per_dispatch=steps_per_dispatch)
  config.cpu_compiler_options.update(cpu_compiler_options or {})
  config.model_overrides.update({
      name: value for name, value in model_overrides.items()
      if value != _VIT_DEFAULTS.get(name)
  })
  return config


class StepBenchmark:
  """A model's steps as the loop compiles them, fed a synthetic batch."""

  def __init__(self, config: ml_collections.ConfigDict, num_classes: int = 10,
               memory_only: bool = False, evaluate: bool = True):
    config_schema.validate(config, jax.device_count())
    self.config, self.module = config, models.from_config(config, num_classes)
    self.mesh = sharding.make_mesh(config.fsdp)
    self.replicated = sharding.replicated(self.mesh)
    tx = optimizer.create_optimizer(config, lambda step: 1e-3)
    make_state = steps.state_shapes if memory_only else steps.initial_state
    self.state = make_state(jax.random.key(0), self.module, tx,
                            config.image_size, self.mesh)
    batch_size, size = config.batch_size, config.image_size
    rng = np.random.default_rng(0)
    split = sources.ArraySource(
        rng.integers(0, 256, (batch_size, size, size, 3), dtype=np.uint8),
        rng.integers(0, num_classes, (batch_size,), dtype=np.int32))
    self.inputs = data.OnDeviceInput(sources.Dataset(split, split, num_classes),
                                     config, self.mesh)
    indices = np.arange(batch_size, dtype=np.int32)
    self.indices, self.mask = next(self.inputs.eval_batches('test'))
    self.key, start = jax.random.key(1), time.perf_counter()
    self.compiled = steps.compile_steps(config, self.inputs, self.state,
                                        self.key, evaluate=evaluate)
    self.compile_seconds = time.perf_counter() - start
    self.train_sums = steps.zero_sums(self.replicated)
    self.steps_per_call = self.compiled.steps_per_dispatch
    self.stacked = self.inputs.stack([indices] * self.steps_per_call,
                                     self.steps_per_call)

  def train_step(self):
    """`steps_per_call` optimizer steps in one call; their sums to wait for."""
    self.state, self.train_sums, _ = self.compiled.train(
        self.state, self.train_sums, self.inputs.train_data, self.stacked,
        self.steps_per_call, self.key)
    return self.train_sums

  def eval_step(self):
    return self.compiled.eval(self.state,
                              steps.zero_sums(self.replicated, steps.EVAL_SUMS),
                              self.inputs.eval_data, self.indices, self.mask)

  @functools.cached_property
  def forward_flops_per_image(self) -> int:
    return flops.forward_flops_per_image(self.module, self.state.variables,
                                         self.config.image_size)

  def train_flops_per_second(self, seconds: float) -> float:
    """The FLOP/s of a train step (three forward passes) of `seconds`."""
    return 3 * self.forward_flops_per_image * self.config.batch_size / seconds


def trace(bench: StepBenchmark, trace_dir, steps: int):
  """A `jax.profiler` trace of `steps` train steps, with TRACED_PROGRAM."""
  with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
    for _ in range(steps):
      jax.block_until_ready(bench.train_step())
  (pathlib.Path(trace_dir) / TRACED_PROGRAM).write_text(
      bench.compiled.train.as_text())


def run_benchmark(config: ml_collections.ConfigDict, num_classes: int = 10,
                  steps_timed: int = 10, memory_only: bool = False,
                  trace_dir: str | None = None,
                  trace_steps: int = 3) -> dict[str, Any]:
  """What `vit_jax.benchmark` reports of `config`'s (`benchmark_config`) steps."""
  num_devices, batch_size = jax.device_count(), config.batch_size
  bench = StepBenchmark(config, num_classes, memory_only)
  overrides = {
      name: config.model_overrides.get(name, _VIT_DEFAULTS[name])
      for name in ('attention', 'remat', 'scan')
  }
  described = dict(model=config.model, batch_size=batch_size,
                   image_size=config.image_size, dtype=config.dtype,
                   devices=f'{num_devices} x {jax.devices()[0].device_kind}',
                   fsdp=bench.mesh.shape['fsdp'], **overrides,
                   steps_per_dispatch=config.steps_per_dispatch)
  compile_times = dict(
      compile_seconds=bench.compile_seconds,
      train_compile_seconds=bench.compiled.train_compile_seconds)
  memory = _memory_mb(bench.compiled.train)
  if memory_only:
    return {**described, **compile_times, **memory}
  train_seconds = median_seconds(bench.train_step,
                                 steps_timed) / bench.steps_per_call
  if trace_dir:
    trace(bench, trace_dir, trace_steps)
  eval_seconds = median_seconds(bench.eval_step, steps_timed)
  timed = {}
  for phase, seconds in (('train', train_seconds), ('eval', eval_seconds)):
    timed[f'{phase}_images_per_second'] = batch_size / seconds
    timed[f'{phase}_ms_per_step'] = 1000 * seconds
  forward = bench.forward_flops_per_image
  options = steps.compiler_options(config)
  peak = measure_matmul_peak(jnp.dtype(config.dtype),
                             sharding.batch_sharded(bench.mesh), options) / 1e9
  xla_flops = (bench.compiled.train.cost_analysis() or {}).get('flops')
  xla_gflops = xla_flops * num_devices / batch_size / 1e9 if xla_flops else None
  train_gflops = bench.train_flops_per_second(train_seconds) / 1e9
  eval_gflops = forward * batch_size / eval_seconds / 1e9
  return dict(
      described, compiler_options=options or {}, **timed, **compile_times,
      train_gflop_per_image=3 * forward / 1e9,
      xla_train_gflop_per_image=xla_gflops, train_gflop_per_second=train_gflops,
      eval_gflop_per_second=eval_gflops, matmul_peak_gflop_per_second=peak,
      train_utilization=train_gflops / peak,
      eval_utilization=eval_gflops / peak, **memory)


def format_table(result: dict[str, Any]) -> str:
  rows = []
  for name, value in result.items():
    if isinstance(value, float):
      value = f'{100 * value:.1f}%' if name.endswith('utilization') else (
          f'{value:,.3f}' if value < 10 else f'{value:,.1f}')
    rows.append((name, str(value)))
  width = max(len(name) for name, _ in rows)
  return '\n'.join(f'{name:<{width}}  {value}' for name, value in rows)

r"""Times the compiled train and eval steps of a model on this machine.

  python -m vit_jax.benchmark --model=ViT-Tiny-CIFAR_4 --batch_size=128 \
      --image_size=32 [--dtype=bfloat16] [--steps=10]
  python -m vit_jax.benchmark --model=SimpleCNN --cpu_devices=1 \
      --cpu_compiler_option=xla_cpu_experimental_ynn_fusion_type=
  python -m vit_jax.benchmark --model=ViT-H_14 --image_size=224 \
      --batch_size=8 --cpu_devices=8 --fsdp=8 --memory_only
  python -m vit_jax.benchmark --trace_dir=/tmp/trace
  python -m vit_jax.benchmark --model=ViT-B_16 --image_size=224 \
      --batch_size=256 --dtype=bfloat16 --attention=cudnn  # on a GPU
  python -m vit_jax.benchmark --model=ViT-L_16 --image_size=224 \
      --batch_size=32 --remat=full --scan --memory_only

The steps are the training loop's own (`vit_jax.steps`: AdamW, on-device
batch gather and preprocessing, the config built from `config_schema`), fed
from synthetic images already on the devices. Prints a
table and, last, one JSON line with the same numbers: images/s, ms/step
(median of --steps after warm-up), compile time of both steps and of the
train step alone (tracing included), FLOPs per image, achieved
FLOP/s and its share of a matmul peak measured on the same devices in the same
run, and XLA's estimate of the step's memory per device. `--memory_only`
compiles the steps for the state's shapes and prints only that estimate, so
the memory of models far larger than this machine can be compared, e.g.
parameters replicated (`--fsdp=1`) against split over 8 devices.
`--trace_dir` also records a `jax.profiler` trace of a few train steps after
the timed ones (open it in TensorBoard or Perfetto;
`experiments/benchmarks/profile_step.py` sums it by kind of work).

FLOPs are counted from the model's jaxpr (`vit_jax.flops`). XLA's cost
analysis of the compiled step, which also counts elementwise work, is printed
beside it as a cross-check.
"""

import dataclasses
import json
import time
from typing import Any

from absl import app
from absl import flags
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from vit_jax import config_schema
from vit_jax import data
from vit_jax import flops
from vit_jax import optimizer
from vit_jax import distributed
from vit_jax import errors
from vit_jax import sharding
from vit_jax import models
from vit_jax import steps
from vit_jax.data import sources
from vit_jax.models import remat_scan

_MODEL = flags.DEFINE_string('model', 'ViT-Tiny-CIFAR_4', 'Registered model.')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 128, 'Global batch size.')
_IMAGE_SIZE = flags.DEFINE_integer('image_size', 32, 'Image side in pixels.')
_NUM_CLASSES = flags.DEFINE_integer('num_classes', 10, 'Classes of the head.')
_DTYPE = flags.DEFINE_enum('dtype', 'float32', list(config_schema.FIELDS['dtype'].choices),
                           'Computation dtype; parameters stay float32.')
_STEPS = flags.DEFINE_integer('steps', 10, 'Timed steps (after 2 warm-up).')
_AUGMENT = flags.DEFINE_bool('augment', True,
                             'Random crop + flip inside the train step.')
_FSDP = flags.DEFINE_integer(
    'fsdp', 1, 'Devices each large parameter and optimizer-state array is '
    'split over (config.fsdp); -1: all.')
_MEMORY_ONLY = flags.DEFINE_bool(
    'memory_only', False, 'Compile the steps for the state\'s shapes and '
    'print XLA\'s per-device memory estimate, allocating and running nothing '
    '(for models larger than this machine).')
_ATTENTION = flags.DEFINE_enum(
    'attention', 'einsum', ['einsum', 'dot_product_attention', 'cudnn'],
    "A ViT's attention (model_overrides.attention); 'cudnn': cuDNN's fused "
    'attention on NVIDIA GPUs.')
_REMAT = flags.DEFINE_enum(
    'remat', 'none', list(remat_scan.REMAT_POLICIES),
    "What a ViT's blocks keep for the backward pass (model_overrides.remat): "
    "'full' recomputes each block, 'dots' keeps its matmuls with weights.")
_SCAN = flags.DEFINE_bool(
    'scan', False, "A ViT's blocks as one nn.scan over stacked parameters "
    '(model_overrides.scan): one block to compile.')
_TRACE_DIR = flags.DEFINE_string(
    'trace_dir', None, 'Also write a jax.profiler trace of --trace_steps '
    'train steps here.')
_TRACE_STEPS = flags.DEFINE_integer('trace_steps', 3, 'Train steps traced.')
_CPU_DEVICES = flags.DEFINE_integer(
    'cpu_devices', distributed.DEFAULT_CPU_DEVICES,
    'Host devices the batch is split over when running on the CPU.')

_CPU_COMPILER_OPTIONS = flags.DEFINE_multi_string(
    'cpu_compiler_option', [],
    'NAME=VALUE: an XLA option both steps and the peak matmul compile with on '
    'a CPU, as config.cpu_compiler_options in a training config.')

_PEAK_MATMUL_SIZE = 2048


def measure_matmul_peak(dtype, placement: jax.sharding.NamedSharding,
                        compiler_options=None,
                        size: int = _PEAK_MATMUL_SIZE) -> float:
  """FLOP/s of large square matmuls, one per device, on all devices at once,
  of random data (a GPU multiplies zeros or constants faster)."""
  num_devices = placement.mesh.size
  a_key, b_key = jax.random.split(jax.random.key(0))
  a = jax.device_put(
      jax.random.normal(a_key, (num_devices * size, size), dtype), placement)
  b = jax.random.normal(b_key, (size, size), dtype)
  matmul = jax.jit(lambda a, b: a @ b).lower(a, b).compile(compiler_options)
  seconds = median_seconds(lambda: matmul(a, b), steps=5)
  return 2 * num_devices * size**3 / seconds


def median_seconds(run, steps: int, warmup: int = 2) -> float:
  """The median time of `steps` calls of `run`, each waited for, after
  `warmup` untimed ones."""
  for _ in range(warmup):
    jax.block_until_ready(run())
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    jax.block_until_ready(run())
    times.append(time.perf_counter() - start)
  return float(np.median(times))


def _memory_mb(compiled) -> dict[str, float]:
  """XLA's estimate of what one device holds while the step runs: its
  arguments (state, batch), temporaries, and the total (outputs that do not
  reuse a donated argument's buffer included)."""
  analysis = compiled.memory_analysis()
  if analysis is None:
    return {}
  total = (analysis.argument_size_in_bytes + analysis.output_size_in_bytes +
           analysis.temp_size_in_bytes - analysis.alias_size_in_bytes)
  return {'train_step_argument_mb': analysis.argument_size_in_bytes / 2**20,
          'train_step_temp_mb': analysis.temp_size_in_bytes / 2**20,
          'train_step_memory_mb': total / 2**20}


def _xla_flops(compiled) -> float | None:
  analysis = compiled.cost_analysis()
  if isinstance(analysis, list):
    analysis = analysis[0] if analysis else None
  return analysis.get('flops') if analysis else None


def benchmark_config(model: str, batch_size: int, image_size: int, dtype: str,
                     augment: bool, cpu_compiler_options: dict[str, str],
                     fsdp: int = 1, attention: str = 'einsum',
                     remat: str = 'none',
                     scan: bool = False) -> ml_collections.ConfigDict:
  """The schema's config with the study's optimizer and loss."""
  config = config_schema.defaults()
  config.update(dict(
      model=model, dtype=dtype, batch_size=batch_size,
      eval_batch_size=batch_size, image_size=image_size, augment=augment,
      pixel_std=(0.25, 0.25, 0.25), label_smoothing=0.1, weight_decay=0.01,
      total_steps=1, fsdp=fsdp))
  config.cpu_compiler_options.update(cpu_compiler_options)
  # A ViT's fields, set where they are not its defaults, so a CNN runs.
  defaults = {f.name: f.default
              for f in dataclasses.fields(models.VisionTransformer)}
  for name, value in dict(attention=attention, remat=remat,
                          scan=scan).items():
    if value != defaults[name]:
      config.model_overrides[name] = value
  return config


class StepBenchmark:
  """A model's train step (and eval step, with `evaluate`) as the training
  loop compiles them for `config` (`benchmark_config`), fed a synthetic
  batch already on the devices; the state only shapes with `memory_only`."""

  def __init__(self, config: ml_collections.ConfigDict, num_classes: int = 10,
               memory_only: bool = False, evaluate: bool = True):
    config_schema.validate(config, jax.device_count())
    self.config = config
    self.module = models.from_config(config, num_classes)
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
    self.inputs = data.OnDeviceInput(
        sources.Dataset(split, split, num_classes), config, self.mesh)
    self.indices = jax.device_put(np.arange(batch_size, dtype=np.int32),
                                  self.replicated)
    self.mask = jax.device_put(np.ones(batch_size, np.float32),
                               self.replicated)
    self.key = jax.random.key(1)
    start = time.perf_counter()
    self.compiled = steps.compile_steps(config, self.inputs, self.state,
                                        self.key, evaluate=evaluate)
    self.compile_seconds = time.perf_counter() - start
    self.train_sums = steps.zero_sums(self.replicated)

  def train_step(self):
    """One optimizer step; returns its metric sums to wait for."""
    self.state, self.train_sums = self.compiled.train(
        self.state, self.train_sums, self.inputs.train_data, self.indices,
        self.key)
    return self.train_sums

  def eval_step(self):
    return self.compiled.eval(self.state, steps.zero_sums(self.replicated),
                              self.inputs.test_data, self.indices, self.mask)

  def forward_flops_per_image(self) -> int:
    return flops.forward_flops_per_image(
        self.module,
        steps.model_variables(self.state.params, self.state.batch_stats),
        self.config.image_size)


def run_benchmark(*, model: str, batch_size: int, image_size: int,
                  num_classes: int = 10, dtype: str = 'float32',
                  steps_timed: int = 10, augment: bool = True,
                  cpu_compiler_options: dict[str, str] | None = None,
                  fsdp: int = 1, memory_only: bool = False,
                  attention: str = 'einsum', remat: str = 'none',
                  scan: bool = False,
                  trace_dir: str | None = None,
                  trace_steps: int = 3) -> dict[str, Any]:
  config = benchmark_config(model, batch_size, image_size, dtype, augment,
                            cpu_compiler_options or {}, fsdp, attention,
                            remat, scan)
  num_devices = jax.device_count()
  bench = StepBenchmark(config, num_classes, memory_only)
  compiled, compile_seconds = bench.compiled, bench.compile_seconds
  described = {
      'model': model,
      'batch_size': batch_size,
      'image_size': image_size,
      'dtype': dtype,
      'devices': f'{num_devices} x {jax.devices()[0].device_kind}',
      'fsdp': bench.mesh.shape['fsdp'],
      'attention': attention,
      'remat': remat,
      'scan': scan,
  }
  compile_times = {'compile_seconds': compile_seconds,
                   'train_compile_seconds': compiled.train_compile_seconds}
  if memory_only:
    return {**described, **compile_times, **_memory_mb(compiled.train)}
  train_seconds = median_seconds(bench.train_step, steps_timed)
  if trace_dir:
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
      for _ in range(trace_steps):
        jax.block_until_ready(bench.train_step())
  eval_seconds = median_seconds(bench.eval_step, steps_timed)

  forward = bench.forward_flops_per_image()
  options = steps.compiler_options(config)
  peak = measure_matmul_peak(jnp.dtype(dtype),
                             sharding.batch_sharded(bench.mesh), options)
  xla_train_flops = _xla_flops(compiled.train)
  train_flops_per_second = 3 * forward * batch_size / train_seconds
  eval_flops_per_second = forward * batch_size / eval_seconds
  return {
      **described,
      'compiler_options': options or {},
      'train_images_per_second': batch_size / train_seconds,
      'train_ms_per_step': 1000 * train_seconds,
      'eval_images_per_second': batch_size / eval_seconds,
      'eval_ms_per_step': 1000 * eval_seconds,
      **compile_times,
      'train_gflop_per_image': 3 * forward / 1e9,
      'xla_train_gflop_per_image': (xla_train_flops * num_devices / batch_size /
                                    1e9 if xla_train_flops else None),
      'train_gflop_per_second': train_flops_per_second / 1e9,
      'eval_gflop_per_second': eval_flops_per_second / 1e9,
      'matmul_peak_gflop_per_second': peak / 1e9,
      'train_utilisation': train_flops_per_second / peak,
      'eval_utilisation': eval_flops_per_second / peak,
      **_memory_mb(compiled.train),
  }


def format_table(result: dict[str, Any]) -> str:
  rows = []
  for name, value in result.items():
    if isinstance(value, float):
      value = f'{100 * value:.1f}%' if name.endswith('utilisation') else (
          f'{value:,.3f}' if value < 10 else f'{value:,.1f}')
    rows.append((name, str(value)))
  width = max(len(name) for name, _ in rows)
  return '\n'.join(f'{name:<{width}}  {value}' for name, value in rows)


def _parse_options(options: list[str]) -> dict[str, str]:
  parsed = {}
  for option in options:
    name, equals, value = option.partition('=')
    if not equals:
      raise app.UsageError(f'--cpu_compiler_option={option!r} is not '
                           'NAME=VALUE.')
    parsed[name.lstrip('-')] = value
  return parsed


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  distributed.set_cpu_devices(_CPU_DEVICES.value)
  result = errors.exit_on_user_error(lambda: run_benchmark(
      model=_MODEL.value, batch_size=_BATCH_SIZE.value,
      image_size=_IMAGE_SIZE.value, num_classes=_NUM_CLASSES.value,
      dtype=_DTYPE.value, steps_timed=_STEPS.value, augment=_AUGMENT.value,
      cpu_compiler_options=_parse_options(_CPU_COMPILER_OPTIONS.value),
      fsdp=_FSDP.value, memory_only=_MEMORY_ONLY.value,
      attention=_ATTENTION.value, remat=_REMAT.value, scan=_SCAN.value,
      trace_dir=_TRACE_DIR.value,
      trace_steps=_TRACE_STEPS.value))
  print(format_table(result))
  print(json.dumps(result))


if __name__ == '__main__':
  app.run(main)

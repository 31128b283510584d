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
                        compiler_options=None) -> float:
  """FLOP/s of large square matmuls, one per device, on all devices at once."""
  n = _PEAK_MATMUL_SIZE
  num_devices = placement.mesh.size
  a = jax.device_put(jnp.ones((num_devices * n, n), dtype), placement)
  b = jnp.ones((n, n), dtype)
  matmul = jax.jit(lambda a, b: a @ b).lower(a, b).compile(compiler_options)
  seconds = _median_seconds(lambda: matmul(a, b), steps=5)
  return 2 * num_devices * n**3 / seconds


def _median_seconds(run, steps: int, warmup: int = 2) -> float:
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
  config_schema.validate(config, num_devices)
  module = models.from_config(config, num_classes)
  mesh = sharding.make_mesh(config.fsdp)
  replicated = sharding.replicated(mesh)
  tx = optimizer.create_optimizer(config, lambda step: 1e-3)
  make_state = steps.state_shapes if memory_only else steps.initial_state
  state = make_state(jax.random.key(0), module, tx, image_size, mesh)
  rng = np.random.default_rng(0)
  split = sources.ArraySource(
      rng.integers(0, 256, (batch_size, image_size, image_size, 3),
                   dtype=np.uint8),
      rng.integers(0, num_classes, (batch_size,), dtype=np.int32))
  inputs = data.OnDeviceInput(sources.Dataset(split, split, num_classes),
                              config, mesh)
  indices = jax.device_put(np.arange(batch_size, dtype=np.int32), replicated)
  mask = jax.device_put(np.ones(batch_size, np.float32), replicated)
  key = jax.random.key(1)

  start = time.perf_counter()
  compiled = steps.compile_steps(config, inputs, state, key)
  compile_seconds = time.perf_counter() - start
  described = {
      'model': model,
      'batch_size': batch_size,
      'image_size': image_size,
      'dtype': dtype,
      'devices': f'{num_devices} x {jax.devices()[0].device_kind}',
      'fsdp': mesh.shape['fsdp'],
      'attention': attention,
      'remat': remat,
      'scan': scan,
  }
  compile_times = {'compile_seconds': compile_seconds,
                   'train_compile_seconds': compiled.train_compile_seconds}
  if memory_only:
    return {**described, **compile_times, **_memory_mb(compiled.train)}
  train_sums = steps.zero_sums(replicated)

  def one_train_step():
    nonlocal state, train_sums
    state, train_sums = compiled.train(state, train_sums, inputs.train_data,
                                       indices, key)
    return train_sums

  def one_eval_step():
    return compiled.eval(state, steps.zero_sums(replicated),
                         inputs.test_data, indices, mask)

  train_seconds = _median_seconds(one_train_step, steps_timed)
  if trace_dir:
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
      for _ in range(trace_steps):
        jax.block_until_ready(one_train_step())
  eval_seconds = _median_seconds(one_eval_step, steps_timed)

  forward = flops.forward_flops_per_image(
      module, steps.model_variables(state.params, state.batch_stats),
      image_size)
  options = steps.compiler_options(config)
  peak = measure_matmul_peak(jnp.dtype(dtype), sharding.batch_sharded(mesh),
                             options)
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

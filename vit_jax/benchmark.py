r"""Times the compiled train and eval steps of a model on this machine.

  python -m vit_jax.benchmark --model=ViT-Tiny-CIFAR_4 --batch_size=128 \
      --image_size=32 [--dtype=bfloat16] [--steps=10]
  python -m vit_jax.benchmark --model=ViT-H_14 --image_size=224 \
      --batch_size=8 --cpu_devices=8 --fsdp=8 --memory_only

The training loop's own steps, fed synthetic images already on the devices
(docs/benchmarks.md). Prints a table and, last, one JSON line."""

# pylint: disable=g-import-not-at-top,wrong-import-position
from vit_jax.runtime import stop_signals

if __name__ == '__main__':
  # First, before jax loads: Ctrl-C or SIGTERM stops the benchmark at once.
  stop_signals.catch(at_once='stopped the benchmark; it measured nothing')

import json
import os

from absl import app
from absl import flags

from vit_jax import config_schema
from vit_jax import errors
from vit_jax.models.layers import attention
from vit_jax.models import remat_scan
from vit_jax.runtime import command
from vit_jax.runtime import distributed
from vit_jax.training import step_benchmark

_MODEL = flags.DEFINE_string('model', 'ViT-Tiny-CIFAR_4', 'Registered model.')
_BATCH_SIZE = flags.DEFINE_integer('batch_size', 128, 'Global batch size.')
_IMAGE_SIZE = flags.DEFINE_integer('image_size', 32, 'Image side in pixels.')
_NUM_CLASSES = flags.DEFINE_integer('num_classes', 10, 'Classes of the head.')
_DTYPE = flags.DEFINE_enum('dtype', 'float32',
                           list(config_schema.FIELDS['dtype'].choices),
                           'Computation dtype; parameters stay float32.')
_STEPS = flags.DEFINE_integer('steps', 10, 'Timed steps (after 2 warm-up).',
                              lower_bound=1)
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
    'attention', 'auto', list(attention.ATTENTIONS),
    "A ViT's attention (model_overrides.attention); 'cudnn': cuDNN's fused "
    "attention on NVIDIA GPUs, which 'auto' picks there in bfloat16.")
_REMAT = flags.DEFINE_enum(
    'remat', 'none', list(remat_scan.REMAT_POLICIES),
    "What a ViT's blocks keep for the backward pass (model_overrides.remat): "
    "'full' recomputes each block, 'dots' keeps its matmuls with weights.")
_SCAN = flags.DEFINE_bool(
    'scan', False, "A ViT's blocks as one nn.scan over stacked parameters "
    '(model_overrides.scan): one block to compile.')
_STEPS_PER_DISPATCH = flags.DEFINE_integer(
    'steps_per_dispatch', 1, 'Train steps in one compiled call, as '
    'config.steps_per_dispatch; the time is per step.', lower_bound=1)
_TRACE_DIR = flags.DEFINE_string(
    'trace_dir', None, 'Also write a jax.profiler trace of --trace_steps '
    'train steps here.')
flags.register_validator(
    'trace_dir', lambda path: not path or not os.path.isfile(path),
    'a file, not a directory: pass a directory (made if missing).')
_TRACE_STEPS = flags.DEFINE_integer('trace_steps', 3, 'Train steps traced.')
_CPU_DEVICES = command.define_shared_flags('cpu_devices')[0]
_CPU_COMPILER_OPTIONS = flags.DEFINE_multi_string(
    'cpu_compiler_option', [],
    'NAME=VALUE: an XLA option both steps and the peak matmul compile with on '
    'a CPU, as config.cpu_compiler_options in a training config.')


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
  config = step_benchmark.benchmark_config(
      _MODEL.value, _BATCH_SIZE.value, _IMAGE_SIZE.value, _DTYPE.value,
      _AUGMENT.value, _parse_options(_CPU_COMPILER_OPTIONS.value), _FSDP.value,
      _STEPS_PER_DISPATCH.value, attention=_ATTENTION.value, remat=_REMAT.value,
      scan=_SCAN.value)
  result = errors.exit_on_user_error(lambda: step_benchmark.run_benchmark(
      config, _NUM_CLASSES.value, _STEPS.value, _MEMORY_ONLY.value, _TRACE_DIR.
      value, _TRACE_STEPS.value))
  print(step_benchmark.format_table(result))
  print(json.dumps(result))


if __name__ == '__main__':
  app.run(main, flags_parser=command.parse_flags)

"""A train step under variants, each in a fresh process, then their medians."""

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

# Runs from a checkout, installed or not (on the GPU machine the project's
# dependencies come as wheels, the project itself does not).
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

# pylint: disable=g-import-not-at-top,wrong-import-position
import flax.linen as nn
import jax
import jax.numpy as jnp

from experiments import runs
from experiments.benchmarks import gpu_plan
from experiments.benchmarks import gpu_sections
from experiments.benchmarks import study_step
from vit_jax.models import encoder
from vit_jax.models import names
from vit_jax.models.layers import attention
from vit_jax.models.layers import encoder_block
from vit_jax.models.layers import fused_attention
from vit_jax.models.layers import mlp
from vit_jax.models.layers import patch_embedding
from vit_jax.runtime import distributed
from vit_jax.training import step_benchmark
# pylint: enable=g-import-not-at-top,wrong-import-position

# `hash`: our dropout; `flax_*`: `flax.linen.Dropout` put in its place by
# hand, with that `jax_default_prng_impl`.
CPU_VARIANTS = ('hash', 'flax_threefry', 'flax_rbg', 'flax_unsafe_rbg')
# The GPU variants that are XLA flags, the baseline first; the code
# variants after them (GPU_CODE_VARIANTS, swapped in `run_gpu_variant`).
GPU_FLAGS = dict(default='',
                 cudnn_layer_norm='--xla_gpu_enable_cudnn_layer_norm=true',
                 cublaslt='--xla_gpu_enable_cublaslt=true',
                 no_command_buffers='--xla_gpu_enable_command_buffer=',
                 autotune_level_0='--xla_gpu_autotune_level=0')
# cuDNN's attention with the tokens padded to 64; the patch embedding as one
# matmul; q, k and v projected by one matmul, as timm's step does.
GPU_CODE_VARIANTS = ('tokens_to_64', 'patch_matmul', 'fused_qkv')
# The variant whose runs also trace the step: without command buffers each
# kernel names its HLO op, so all of them, cuBLAS's included, are summed by
# part of the model.
PROFILED = 'no_command_buffers'


def run_cpu_variant(variant: str, steps: int) -> dict:
  if variant.startswith('flax_'):  # flax's dropout in the ViT in place of ours
    # Every module of the ViT that drops out (stochastic depth is off here).
    for module in (encoder, encoder_block, mlp, attention):
      module.Dropout = nn.Dropout
    if variant != 'flax_threefry':  # its masks drawn with that PRNG
      jax.config.update('jax_default_prng_impl', variant.removeprefix('flax_'))
  distributed.set_cpu_devices(4)  # before jax starts
  config = step_benchmark.benchmark_config('ViT-Tiny-CIFAR_4', 128, 32,
                                           attention='einsum')
  result = step_benchmark.run_benchmark(config, steps_timed=steps)
  keys = 'train_images_per_second', 'train_utilization'
  return {'variant': variant, **{k: result[k] for k in keys}}


def run_gpu_variant(variant: str, steps: int, smoke: bool) -> dict:
  """ViT-B/16's step as gpu.py's rows time it, under the caller's XLA flags."""
  if jax.default_backend() != 'gpu' and not smoke:
    raise SystemExit('No GPU here: ViT-B/16 at its size would take hours; '
                     'add --smoke to run the code on a CPU.')
  if variant == 'tokens_to_64':
    fused_attention.KERNELS['cudnn'] = ('cudnn', 64)
  if variant == 'patch_matmul':
    use_patch_matmul()
  if variant == 'fused_qkv':
    use_fused_qkv()
  plan = gpu_plan.SMOKE if smoke else gpu_plan.H100
  _, model, batch = plan.models[0]
  bench, batch = gpu_sections.fitting_ours(plan, model, batch, attention='auto')
  seconds = step_benchmark.median_seconds(bench.train_step, steps)
  result = dict(variant=variant, batch_size=batch,
                train_images_per_second=batch / seconds,
                compile_seconds=bench.compile_seconds)
  if variant == PROFILED:
    # Its timing first, kept should the trace fail or outrun the run's time.
    print(RESULT + json.dumps(result), flush=True)
    try:
      result['profile'] = gpu_sections.trace_profile(bench, plan.profile_steps)
    except Exception as e:  # pylint: disable=broad-except
      result['profile'] = {'failed': gpu_sections.failure_note(e)}
  return result


def use_patch_matmul():
  """The patch embedding as a matmul of the same parameters: one function."""
  conv = patch_embedding.embed_patches

  def embed_patches(images, patch_size, hidden_size, *, shifted, dtype):
    if shifted:
      return conv(images, patch_size, hidden_size, shifted=True, dtype=dtype)
    patches = patch_embedding.patch_grid(images, patch_size)
    # The conv's kernel, (row, column, channel) -> hidden.
    return nn.DenseGeneral(hidden_size, axis=(-3, -2, -1), dtype=dtype,
                           name=names.PATCH_EMBEDDING)(patches.reshape(
                               *patches.shape[:-1], patch_size, patch_size,
                               images.shape[-1]))

  patch_embedding.embed_patches = embed_patches


def use_fused_qkv():
  """q, k and v projected by one matmul (timm's `qkv`) of their 3 kernels."""

  def project_qkv(x, projections, layout):
    kernels, biases = zip(*projections)
    bias = jnp.concatenate(biases, axis=0)  # the heads of q, then k, then v
    qkv = jnp.einsum(f'btd,dhe->{layout}', x, jnp.concatenate(
        kernels, axis=1)) + (bias[:, None, :] if layout == 'bhte' else bias)
    return tuple(jnp.split(qkv, len(projections), axis=layout.index('h')))

  attention.project_qkv = project_qkv


RESULT = 'step_variants result: '  # the line of a run's result


def _run(variant: str, args) -> dict:
  """One run of `variant` in a fresh process: its result, or why it has none."""
  command = [
      sys.executable, __file__, f'--variant={variant}', f'--steps={args.steps}'
  ]
  env = dict(os.environ)
  if args.gpu:
    command += ['--gpu'] + (['--smoke'] if args.smoke else [])
    env['XLA_FLAGS'] = ' '.join(
        filter(None, (env.get('XLA_FLAGS', ''), GPU_FLAGS.get(variant))))
  stdout, _, failed = study_step.run(command, args.run_timeout, env)
  printed = [line for line in stdout.splitlines() if line.startswith(RESULT)]
  if not printed:
    return {'variant': variant, 'failed': failed or 'printed no result'}
  result = json.loads(printed[-1].removeprefix(RESULT))
  # The profiled variant prints its timing before its trace, which failed.
  return {**result, 'profile': {'failed': failed}} if failed else result


def main():
  parser = study_step.parser(
      __doc__, {
          'gpu': 'ViT-B/16 on a GPU under GPU_FLAGS and GPU_CODE_VARIANTS.',
          'smoke': 'With --gpu: a one-layer model, for a CPU.'
      }, rounds=3, steps=10)
  parser.add_argument(
      '--variants', help='Comma-separated, the first the '
      'baseline; default: all.')
  parser.add_argument('--seconds', type=float, default=float('inf'),
                      help='Start no run after this many seconds.')
  parser.add_argument(
      '--run_timeout', type=float, default=120, help='Seconds '
      'one run may take before it counts as failed.')
  parser.add_argument('--output', type=pathlib.Path,
                      help='The runs as JSON, rewritten after each.')
  parser.add_argument('--variant', help=argparse.SUPPRESS)  # one run, here
  args = parser.parse_args()
  known = (tuple(GPU_FLAGS) + GPU_CODE_VARIANTS if args.gpu else CPU_VARIANTS)
  if args.variant:  # one run, in this process
    result = (run_gpu_variant(args.variant, args.steps, args.smoke)
              if args.gpu else run_cpu_variant(args.variant, args.steps))
    print(RESULT + json.dumps(result))
    return

  variants = tuple(args.variants.split(',')) if args.variants else known
  if unknown := sorted(set(variants) - set(known)):
    parser.error(f'unknown variants {", ".join(unknown)}; use some of '
                 f'{", ".join(known)}')
  start, results = time.monotonic(), []
  # The baseline first in each round, so that a cut round still has it.
  for round_number, variant in study_step.rounds(variants[1:], args.rounds,
                                                 first=variants[:1]):
    if time.monotonic() - start > args.seconds:
      break
    result = {**_run(variant, args), 'round': round_number}
    results.append(result)
    if args.output:
      args.output.write_text(json.dumps(results, indent=1) + '\n')
    said = (f'{result["train_images_per_second"]:.1f} img/s'
            if 'failed' not in result else f'failed: {result["failed"]}')
    print(f'round {round_number}: {variant}: {said}', flush=True)
  rows = []
  for variant in variants:
    done = [r for r in results if r['variant'] == variant and 'failed' not in r]
    rows.append([variant, len(done)] + [
        f'{statistics.median(r[key] for r in done):.1f}' if done else ''
        for key in ['train_images_per_second'] + ['compile_seconds'] * args.gpu
    ])
  print('\n' + runs.markdown_table(['variant', 'runs', 'median train img/s'] +
                                   ['median compile s'] * args.gpu, rows))


if __name__ == '__main__':
  main()

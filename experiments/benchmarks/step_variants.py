r"""Attempts 13-16 of the optimisation log: the study ViT's train step with
other dropout random generators and jax's attention, against our default.

  python experiments/benchmarks/step_variants.py --rounds=3

Each variant runs `vit_jax.benchmark`'s train step (ViT-Tiny-CIFAR_4, batch
128, augmented, 4 host devices) in a fresh process, in alternating order by
round; prints each run and a table of medians.

- `hash`: our dropout (`vit_jax.models.layers.dropout`), the default.
- `flax_threefry`, `flax_rbg`, `flax_unsafe_rbg`: `flax.linen.Dropout` with
  jax's PRNG implementation set by `jax_default_prng_impl`. The log kept the
  hash, so the model has no option for flax's dropout: these three put it in
  place of ours by hand, only to measure attempts 13-15 again.
- `dot_product_attention`: the benchmark's
  `attention='dot_product_attention'`.
"""

import argparse
import json
import pathlib
import statistics
import subprocess
import sys

from experiments.benchmarks import study_step

VARIANTS = ('hash', 'flax_threefry', 'flax_rbg', 'flax_unsafe_rbg',
            'dot_product_attention')
ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_variant(variant: str, steps: int) -> dict:
  if variant.startswith('flax_'):
    _use_flax_dropout(variant.removeprefix('flax_'))
  attention = ('dot_product_attention' if variant == 'dot_product_attention'
               else 'einsum')
  result = study_step.measure(4, steps_timed=steps, attention=attention)
  return {'variant': variant,
          'train_images_per_second': result['train_images_per_second'],
          'train_utilisation': result['train_utilisation']}


def _use_flax_dropout(prng_impl: str):
  """Attempts 13-15: flax's dropout in the ViT in place of ours, its masks
  drawn with `prng_impl` ('threefry': jax's default)."""
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  # pylint: disable=g-import-not-at-top
  from vit_jax.models import encoder
  from vit_jax.models.layers import attention
  from vit_jax.models.layers import encoder_block
  from vit_jax.models.layers import mlp
  # pylint: enable=g-import-not-at-top
  # Every module of the ViT that drops out (stochastic depth is off here).
  for module in (encoder, encoder_block, mlp, attention):
    module.Dropout = nn.Dropout
  if prng_impl != 'threefry':
    jax.config.update('jax_default_prng_impl', prng_impl)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--steps', type=int, default=10)
  parser.add_argument('--variant', choices=VARIANTS)
  args = parser.parse_args()
  if args.variant:
    print(json.dumps(run_variant(args.variant, args.steps)))
    return

  rates = {variant: [] for variant in VARIANTS}
  for round_index in range(args.rounds):
    order = VARIANTS if round_index % 2 == 0 else VARIANTS[::-1]
    for variant in order:
      out = subprocess.run(
          [sys.executable, __file__, f'--variant={variant}',
           f'--steps={args.steps}'],
          cwd=ROOT, check=True, capture_output=True, text=True)
      rate = json.loads(out.stdout.strip().splitlines()[-1])[
          'train_images_per_second']
      rates[variant].append(rate)
      print(f'round {round_index + 1}: {variant}: {rate:.1f} img/s',
            flush=True)
  print()
  study_step.print_table(
      ('variant', 'median train img/s'),
      ((variant, f'{statistics.median(values):.1f}')
       for variant, values in rates.items()))


if __name__ == '__main__':
  main()

r"""Attempts 13-16 of the optimisation log: the study ViT's train step with
other dropout random generators and jax's attention, against our default.

  python experiments/benchmarks/step_variants.py --rounds=3

Each variant runs `vit_jax.benchmark`'s train step (ViT-Tiny-CIFAR_4, batch
128, augmented, 4 host devices) in a fresh process, in alternating order by
round; prints each run and a table of medians.

- `hash`: our dropout (`vit_jax.models.dropout`), the default.
- `flax_threefry`, `flax_rbg`, `flax_unsafe_rbg`: `flax.linen.Dropout` with
  jax's PRNG implementation set by `jax_default_prng_impl`.
- `dot_product_attention`: the model's `attention='dot_product_attention'`.
"""

import argparse
import functools
import json
import pathlib
import statistics
import subprocess
import sys

VARIANTS = ('hash', 'flax_threefry', 'flax_rbg', 'flax_unsafe_rbg',
            'dot_product_attention')
ROOT = pathlib.Path(__file__).resolve().parents[2]


def run_variant(variant: str, steps: int) -> dict:
  from vit_jax import distributed# pylint: disable=g-import-not-at-top
  distributed.set_cpu_devices(4)
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from vit_jax import benchmark  # pylint: disable=g-import-not-at-top
  from vit_jax.models import registry  # pylint: disable=g-import-not-at-top
  from vit_jax.models import vit  # pylint: disable=g-import-not-at-top

  if variant.startswith('flax_'):
    vit.Dropout = nn.Dropout
    impl = variant.removeprefix('flax_')
    if impl != 'threefry':
      jax.config.update('jax_default_prng_impl', impl)
  if variant == 'dot_product_attention':
    # pylint: disable-next=protected-access
    models = registry._MODELS
    models['ViT-Tiny-CIFAR_4'] = functools.partial(
        models['ViT-Tiny-CIFAR_4'], attention='dot_product_attention')
  result = benchmark.run_benchmark(
      model='ViT-Tiny-CIFAR_4', batch_size=128, image_size=32,
      steps_timed=steps, augment=True)
  return {'variant': variant,
          'train_images_per_second': result['train_images_per_second'],
          'train_utilisation': result['train_utilisation']}


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
  print('\n| variant | median train img/s |')
  print('| --- | ---: |')
  for variant, values in rates.items():
    print(f'| {variant} | {statistics.median(values):.1f} |')


if __name__ == '__main__':
  main()

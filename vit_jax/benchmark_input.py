r"""Times the streaming input on this host: how many training images per
second one process reads, crops and resizes, to compare with what the
accelerators consume (`vit_jax.benchmark`).

  python -m vit_jax.benchmark_input --dataset=image_folder \
      --data_dir=DIR --image_size=224 --batch_size=256 --threads=8 [--steps=20]

Reads `--steps` training batches of `config.dataset` through
`data.StreamingInput` (Inception crop + flip, resize to --image_size) on one
device, after one warm-up batch, and prints a table and one JSON line:
images/s, ms per batch, threads.
"""

import json
import time

from absl import app
from absl import flags
import jax
import ml_collections

from vit_jax import config_schema
from vit_jax import data
from vit_jax.data import sources


def run_benchmark(config: ml_collections.ConfigDict, steps: int) -> dict:
  mesh = jax.make_mesh((1,), ('data',), devices=jax.devices()[:1])
  inputs = data.StreamingInput(sources.open_dataset(config), config, mesh)
  needed = (steps + 1) * config.batch_size
  if inputs.train_size < needed:
    raise ValueError(f'{steps + 1} batches of {config.batch_size} need '
                     f'{needed} training images; the dataset has '
                     f'{inputs.train_size}. Lower --steps or --batch_size.')
  batches = inputs.train_batches(inputs.position(0))
  jax.block_until_ready(next(batches))  # threads started, first batch read
  start = time.perf_counter()
  for _ in range(steps):
    jax.block_until_ready(next(batches))
  seconds = (time.perf_counter() - start) / steps
  batches.close()
  return {
      'dataset': config.dataset,
      'image_size': config.image_size,
      'batch_size': config.batch_size,
      'threads': inputs.threads,
      'images_per_second': config.batch_size / seconds,
      'ms_per_batch': 1000 * seconds,
  }


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {" ".join(argv[1:])}')
  args = flags.FLAGS
  config = config_schema.defaults()
  config.update(dict(
      dataset=args.dataset, data_dir=args.data_dir or '',
      input_pipeline='streaming', batch_size=args.batch_size,
      eval_batch_size=args.batch_size, image_size=args.image_size,
      input_threads=args.threads, total_steps=args.steps + 1))
  try:
    result = run_benchmark(config, args.steps)
  except ValueError as e:  # DatasetError included
    raise app.UsageError(str(e)) from e
  width = max(map(len, result))
  for name, value in result.items():
    shown = f'{value:,.1f}' if isinstance(value, float) else str(value)
    print(f'{name:<{width}}  {shown}')
  print(json.dumps(result))


def _define_flags():
  # Defined only when run: vit_jax.benchmark, imported beside this module in
  # the tests, defines flags of the same names.
  flags.DEFINE_string('dataset', 'image_folder',
                      'config.dataset: image_folder, cifar10, tfds:NAME.')
  flags.DEFINE_string('data_dir', None, 'config.data_dir.')
  flags.DEFINE_integer('image_size', 224, 'Output resolution.')
  flags.DEFINE_integer('batch_size', 256, 'Images per batch.')
  flags.DEFINE_integer('threads', 0, '0: one per CPU core.')
  flags.DEFINE_integer('steps', 20, 'Timed batches.')


if __name__ == '__main__':
  _define_flags()
  app.run(main)

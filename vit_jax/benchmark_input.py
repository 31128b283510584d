r"""Times the streaming input on this host, to choose `config.input_workers`
(docs/benchmarks.md).

  python -m vit_jax.benchmark_input --dataset=image_folder \
      --data_dir=DIR --image_size=224 --batch_size=256 --workers=0,-1 \
      [--steps=20] [--rounds=3]

Prints the medians of each `--workers` setting as a table and one JSON line."""

# pylint: disable=g-import-not-at-top,wrong-import-position
from vit_jax.runtime import stop_signals

if __name__ == '__main__':
  # First, before jax loads: Ctrl-C or SIGTERM stops it at once.
  stop_signals.catch(at_once='stopped the input benchmark; it measured nothing')

import json
import os
import statistics
import sys
import time

from absl import app
from absl import flags
import jax
import ml_collections

from vit_jax import config_schema
from vit_jax import data
from vit_jax.data import sources
from vit_jax.runtime import command


def loader_config(dataset: str, data_dir: str, batch_size: int, image_size: int,
                  steps: int) -> ml_collections.ConfigDict:
  """The schema's streaming config of `dataset` for `steps` + 1 batches."""
  return config_schema.defaults(
      dataset=dataset, data_dir=data_dir, input_pipeline='streaming',
      batch_size=batch_size, eval_batch_size=batch_size, image_size=image_size,
      total_steps=steps + 1)


def _time_loader(config: ml_collections.ConfigDict, steps: int,
                 workers: int) -> dict:
  """One run: seconds to the first batch, and steady seconds per batch."""
  mesh = jax.make_mesh((1,), ('data',), devices=jax.devices()[:1])
  inputs = data.StreamingInput(sources.open_dataset(config), config, mesh,
                               workers=workers)
  needed = (steps + 1) * config.batch_size
  if inputs.train_size < needed:
    raise ValueError(f'{steps + 1} batches of {config.batch_size} need '
                     f'{needed} training images; the dataset has '
                     f'{inputs.train_size}. Lower --steps or --batch_size.')
  start, batches = time.perf_counter(), inputs.train_batches(inputs.position(0))

  def on_device():  # as the loop takes it: a block of one step
    return jax.block_until_ready(inputs.stack([next(batches)], 1))

  on_device()
  first = time.perf_counter()
  for _ in range(steps):
    on_device()
  end = time.perf_counter()
  batches.close()
  return dict(first_batch_seconds=first - start,
              seconds_per_batch=(end - first) / steps, workers=inputs.workers,
              threads=inputs.threads)


def run_benchmark(config: ml_collections.ConfigDict, steps: int,
                  workers: list[int], rounds: int) -> list[dict]:
  """Per `workers` setting, the medians over `rounds` alternating runs."""
  runs = {setting: [] for setting in workers}
  for _ in range(rounds):
    for setting in workers:
      runs[setting].append(_time_loader(config, steps, setting))
  results = []
  for setting, timed in runs.items():
    seconds = statistics.median(r['seconds_per_batch'] for r in timed)
    processes, threads = timed[0]['workers'], timed[0]['threads']
    # Threads share this process's usable cores; each worker is a process.
    cores = min(processes, os.cpu_count() or 1) if processes else threads
    loader = (f'{processes} worker processes'
              if processes else f'{threads} threads')
    first = statistics.median(r['first_batch_seconds'] for r in timed)
    results.append(
        dict(loader=loader, input_workers=setting,
             images_per_second=config.batch_size / seconds,
             images_per_second_per_core=config.batch_size / seconds / cores,
             ms_per_batch=1000 * seconds, first_batch_seconds=first))
  return results


def main(argv):
  if len(argv) > 1:
    sys.exit(f'error: unexpected arguments {" ".join(argv[1:])}.')
  command.quiet_libraries()
  args = flags.FLAGS
  config = loader_config(args.dataset, args.data_dir or '', args.batch_size,
                         args.image_size, args.steps)
  try:
    results = run_benchmark(config, args.steps, [int(w) for w in args.workers],
                            args.rounds)
  except ValueError as e:  # DatasetError included
    # The data's messages name the trainer's flag for the data.
    sys.exit(f'error: {e}'.replace('--config.data_dir', '--data_dir'))
  print(f'{args.steps} steady batches of {args.batch_size} at '
        f'{args.image_size}px after one start-up batch, {os.cpu_count()} '
        f'CPUs, medians of {args.rounds} alternating rounds')
  header = (f'{"loader":<22} {"images/s":>9} {"per core":>9} '
            f'{"ms/batch":>9} {"first batch s":>14}')
  print(header, '-' * len(header), sep='\n')
  for r in results:
    print(f'{r["loader"]:<22} {r["images_per_second"]:9.1f} '
          f'{r["images_per_second_per_core"]:9.1f} {r["ms_per_batch"]:9.1f} '
          f'{r["first_batch_seconds"]:14.2f}')
  summary = dict(dataset=config.dataset, image_size=args.image_size,
                 batch_size=args.batch_size, steps=args.steps,
                 rounds=args.rounds, cpus=os.cpu_count(), results=results)
  print(json.dumps(summary))


def _define_flags():
  # Defined only when run: vit_jax.benchmark, imported beside this module in
  # the tests, defines flags of the same names.
  flags.DEFINE_string('dataset', 'image_folder',
                      'config.dataset: image_folder, cifar10, tfds:NAME.')
  flags.DEFINE_string('data_dir', None, 'config.data_dir.')
  flags.DEFINE_integer('image_size', 224, 'Output resolution.', lower_bound=1)
  flags.DEFINE_integer('batch_size', 256, 'Images per batch.', lower_bound=1)
  flags.DEFINE_list(
      'workers', ['0', '-1'], 'config.input_workers settings '
      'to compare: 0 threads, -1 one process per CPU core, N processes.')
  flags.register_validator(
      'workers', lambda ws: all(w.lstrip('-').isdigit() for w in ws),
      'each must be an integer: 0 (threads), -1 or N (processes).')
  flags.DEFINE_integer('steps', 20, 'Timed batches after the first.',
                       lower_bound=1)
  flags.DEFINE_integer('rounds', 3, 'Alternating runs of every setting.',
                       lower_bound=1)


if __name__ == '__main__':
  _define_flags()
  app.run(main, flags_parser=command.parse_flags)

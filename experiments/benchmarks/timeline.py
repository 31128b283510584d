"""Where a study run's seconds go: its start-up's phases, then each epoch's."""

import pathlib

from experiments import runs
from experiments.benchmarks import gpu_plan
from experiments.benchmarks import study_step

HERE = pathlib.Path(__file__).resolve().parent
TINY = gpu_plan.ONE_LAYER_OVERRIDES
# A record's seconds in all, then by phase.
SECONDS = ('seconds', 'steps', 'input', 'evaluation', 'checkpoint', 'other')


def timeline(summary: dict, records: list[dict]) -> dict:
  """A run's start-up phases and each record's, in seconds (none untimed)."""
  return dict(
      startup_seconds=summary.get('startup_seconds', {}), records=[{
          'epoch': r['epoch'], 'seconds': r['seconds'],
          **r.get('phase_seconds', {})
      } for r in records])


def table(measured: dict) -> str:
  """The start-up's phases in a line, then a table of each record's."""
  startup = measured['startup_seconds']
  line = f'Start-up, {sum(startup.values()):.2f} s: ' + ', '.join(
      f'{phase} {seconds:.2f}' for phase, seconds in startup.items())
  rows = [[f'{r["epoch"]:g}', *(f'{r.get(k, 0.0):.3f}' for k in SECONDS)]
          for r in measured['records']]
  return (line + '\n\n' if startup else '') + runs.markdown_table(
      ['epoch', *SECONDS], rows)


def main():
  parser = study_step.parser(
      __doc__,
      dict(tiny='A one-layer ViT 32 wide in place of ViT-Tiny, its steps too '
           'short to hide what the loop adds to each epoch.'), epochs=10)
  parser.add_argument('--data_dir', required=True,
                      help='The study subset (cifar10-5k).')
  args = parser.parse_args()
  overrides = {'num_epochs': args.epochs, **(TINY if args.tiny else {})}
  run = study_step.run_study(pathlib.Path(args.data_dir).resolve(), overrides)
  if 'failed' in run:
    raise SystemExit(f'error: vit_jax.main: {run["failed"]}')
  measured = timeline(run['summary'], run['records'])
  study_step.write_json(HERE / f'timeline{"_tiny" * args.tiny}.json',
                        {'overrides': overrides, **measured})
  print(table(measured))


if __name__ == '__main__':
  main()

"""The fine-tuning results.json and README table, from the runs."""

import pathlib

from experiments import runs

HERE = pathlib.Path(__file__).resolve().parent


def rows(pretrained: pathlib.Path, workdir: pathlib.Path) -> list[dict]:
  """The pre-trained run and each finished fine-tuning in `workdir`."""
  tuned = [d for d in workdir.glob('finetune_*') if runs.finished(d)]
  return [{
      'run': 'pre-trained (configs/cifar_small.py)', 'image_size': 32,
      'wall_minutes': None, **runs.read_json(pretrained / 'summary.json')
  }] + [{
      'run': 'fine-tuned (configs/finetune.py)', 'image_size': runs.read_json(
          directory / 'config.json')['image_size'],
      'wall_minutes': sum(r['seconds'] for r in runs.history(directory)) / 60,
      **runs.read_json(directory / 'summary.json')
  } for directory in sorted(tuned, key=lambda d: -int(d.name.split('_')[1]))]


def table(results: list[dict]) -> str:
  return runs.markdown_table([
      'run', 'image size', 'epochs', 'best test acc', 'final test acc',
      'final train acc', 'wall time (min)'
  ], [[
      r['run'], f'{r["image_size"]}x{r["image_size"]}', f'{r["epochs"]:g}',
      *(f'{100 * r[key]:.1f}%'
        for key in ('best_test_accuracy', 'final_test_accuracy',
                    'final_train_accuracy')),
      f'{r["wall_minutes"]:.1f}' if r['wall_minutes'] else ''
  ] for r in results])


def main(argv=None):
  runs.catch_stop_signals()
  parser = runs.parser(__doc__, '/tmp/finetune')
  parser.add_argument('--pretrained', type=pathlib.Path, required=True)
  args = parser.parse_args(argv)
  if not runs.finished(args.pretrained):
    parser.error(f'--pretrained={args.pretrained} has no summary.json: point '
                 'it at a finished configs/cifar_small.py run.')
  if unplanned := runs.unplanned(args.pretrained, {}, {}):
    parser.error(f'--pretrained={args.pretrained} is not the study\'s run, '
                 f'{unplanned}.')
  results = rows(args.pretrained, args.workdir)
  if len(results) == 1:
    parser.error(f'{args.workdir} holds no finished fine-tuning '
                 '(finetune_SIZE/): run experiments.finetune.sweep first.')
  runs.write_summary(HERE, results, str(args.workdir),
                     {'results table': table(results)})


if __name__ == '__main__':
  main()

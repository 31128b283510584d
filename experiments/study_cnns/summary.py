r"""The study's CNNs under each unstated choice, from the sweep's workdirs:

  python -m experiments.study_cnns.summary --workdir=/tmp/study_cnns

writes results.json, metrics.jsonl (every run's logged records) and the
README's table here.
"""

import pathlib

import numpy as np

from experiments import runs
from experiments.small_data.summary import STUDY
from experiments.study_cnns import sweep

HERE = pathlib.Path(__file__).resolve().parent


def collect(workdir: pathlib.Path) -> tuple[list[dict], dict[str, list]]:
  """The finished runs' records, and their logged records by run."""
  records, metrics = [], {}
  for directory in sorted(workdir.glob('*_seed*')):
    choice = directory.name.rsplit('_seed', 1)[0]
    if runs.finished(directory) and choice in sweep.CHOICES:
      records.append(runs.record(directory, {'choice': choice}))
      metrics[directory.name] = [{
          k: v for k, v in r.items() if 'second' not in k
      } for r in runs.history(directory)]
  return records, metrics


def _by_seed(records: list[dict], key: str) -> dict[int, float]:
  return {r['seed']: r[key] for r in records}


def _described(overrides: dict) -> str:
  return ', '.join(f'{k.split(".")[-1]}={v}'
                   for k, v in overrides.items()) or "the config's"


def _tflops(group: list[dict]) -> str:
  counted = [r['train_flops'] for r in group if 'train_flops' in r]
  return f'{np.mean(counted) / 1e12:.0f}' if counted else ''


def table(records: list[dict]) -> str:
  rows = []
  for choice, (model, overrides) in sweep.CHOICES.items():
    group = [r for r in records if r['choice'] == choice]
    if not group:
      continue
    default = [r for r in records if r['choice'] == model]
    against = (runs.compared('this', _by_seed(
        group, 'best_validation_accuracy'), "the config's",
                             _by_seed(default, 'best_validation_accuracy'))
               if choice != model and default else '')
    rows.append([
        runs.NAMES[model],
        _described(overrides),
        len(group),
        *(runs.mean_std([r[key] for r in group])
          for key in ('best_validation_accuracy', 'test_accuracy_at_best_step',
                      'final_train_accuracy')), against,
        ' / '.join(f'{100 * a:.1f}' for a in STUDY[model]),
        _tflops(group),
        runs.wall_time_cell(group)
    ])
  return runs.markdown_table([
      'Model', 'Choice', 'Seeds', 'Validation acc at best (%)',
      'Test acc there (%)', 'Final train acc (%)',
      "On validation, against the config's choice",
      'Study: best test / final train (%)', 'Training TFLOPs', 'Wall time (min)'
  ], rows)


def closest(records: list[dict]) -> str:
  """Per model, among the choices with the most seeds, the one whose test
  accuracy (at the epoch validation chose) is nearest the study's: like with
  like, the study's measure."""
  lines = []
  for model, (reported, _) in STUDY.items():
    groups = {
        c: [r for r in records if r['choice'] == c]
        for c, (m, _) in sweep.CHOICES.items() if m == model
    }
    most = max(map(len, groups.values()), default=0)
    if not most:
      continue
    groups = {c: g for c, g in groups.items() if len(g) == most}
    choice, group = min(
        groups.items(), key=lambda item: abs(
            np.mean([r['test_accuracy_at_best_step']
                     for r in item[1]]) - reported))
    tested = [r['test_accuracy_at_best_step'] for r in group]
    gap = 100 * (np.mean(tested) - reported)
    lines.append(
        f'- {runs.NAMES[model]}: {_described(sweep.CHOICES[choice][1])} '
        f'({len(group)} seed{"s" * (len(group) > 1)}): validation '
        f'{runs.mean_std([r["best_validation_accuracy"] for r in group])}, '
        f'test {runs.mean_std(tested)}, {abs(gap):.1f} points '
        f'{"over" if gap > 0 else "under"} the study\'s {100 * reported:.1f}.')
  return '\n'.join(lines)


def main(argv=None):
  runs.catch_stop_signals()
  workdir = runs.parser(__doc__, '/tmp/study_cnns').parse_args(argv).workdir
  records, metrics = collect(workdir)
  runs.write_summary(
      HERE, records, str(workdir),
      {'choices table': table(records), 'closest': closest(records)},
      metrics=metrics)


if __name__ == '__main__':
  main()

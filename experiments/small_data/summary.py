"""The small-data study's results.json, metrics.jsonl, figure and README."""

import json
import pathlib

import numpy as np

from configs import cifar_small
import jax
from experiments import runs
from experiments.small_data import sweep
from vit_jax import models
from vit_jax.analysis import plotting
from vit_jax.formats import params

HERE = pathlib.Path(__file__).resolve().parent

# Best test accuracy / final train accuracy the study reports.
STUDY = {
    'vit': (0.4960, 0.5352), 'simple_cnn': (0.7080, 0.8024),
    'small_resnet': (0.6330, 0.6906),
}


def parameter_count(model: str) -> int:
  shapes = params.param_shapes(
      models.from_config(cifar_small.get_config(model), 10), 32)
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))


def _run_name(record: dict) -> str:
  return f'{record["choice"]}_seed{record["seed"]}'


def collect(workdir: pathlib.Path) -> tuple[list[dict], dict[str, list]]:
  """The sweep's records and each run's logged ones: `workdir`'s, else ours."""
  described = {
      name: {
          'choice': choice,
          'batch_size': overrides.get('batch_size',
                                      cifar_small.MODELS[model][2])
      } for name, (choice, model,
                  overrides) in sweep.planned(sweep.SEEDS).items()
  }
  found = runs.load_records(workdir, described, HERE / 'results.json',
                            _run_name)
  metrics = {}
  if (HERE / 'metrics.jsonl').exists():
    for logged in runs.history(HERE):
      metrics.setdefault(logged.pop('run'), []).append(logged)
  for name in found:
    if runs.finished(workdir / name):
      metrics[name] = [{k: v for k, v in r.items() if 'second' not in k}
                       for r in runs.history(workdir / name)]
  return [found[name] for name in sorted(found)
         ], {name: metrics[name] for name in sorted(found) if name in metrics}


def _of(records: list[dict], choice: str) -> list[dict]:
  return [r for r in records if r['choice'] == choice]


def _mean_std(group: list[dict], key: str) -> str:
  return runs.mean_std([r[key] for r in group])


def _described(choice: str) -> str:
  if choice in sweep.MODELS:
    return "the config's"
  return ', '.join(f'{k.split(".")[-1]}={v}'
                   for k, v in sweep.CHOICES[choice][1].items())


def _study_and_costs(model: str, group: list[dict]) -> list[str]:
  """The study's accuracies, then the runs' TFLOPs and wall time."""
  return [
      ' / '.join(f'{100 * accuracy:.1f}' for accuracy in STUDY[model]),
      runs.tflops_cell(group),
      runs.wall_time_cell(group)
  ]


def table(records: list[dict]) -> str:
  """The config's runs, model by model."""
  rows = []
  for model in sweep.MODELS:
    group = _of(records, model)
    if not group:
      continue
    epochs = ', '.join(f'{r["best_epoch"]:g}' for r in group)
    rows.append([
        runs.NAMES[model], f'{parameter_count(model):,}',
        group[0]['batch_size'],
        len(group),
        *(_mean_std(group, key)
          for key in ('best_validation_accuracy', 'test_accuracy_at_best_step',
                      'final_test_accuracy', 'final_train_accuracy')), epochs,
        *_study_and_costs(model, group)
    ])
  return runs.markdown_table([
      'Model', 'Params', 'Batch size', 'Seeds', 'Validation acc at best (%)',
      'Test acc there (%)', 'Test acc at the end (%)', 'Final train acc (%)',
      'Best epoch (on validation)', 'Study: best test / final train (%)',
      'Training TFLOPs', 'Wall time (min)'
  ], rows)


def comparisons(records: list[dict]) -> str:
  """Each CNN against the ViT, then the CNNs, on test at validation's epoch."""
  lines = []
  for a, b in (('simple_cnn', 'vit'), ('small_resnet', 'vit'),
               ('simple_cnn', 'small_resnet')):
    first, second = (runs.by_seed(_of(records, choice),
                                  'test_accuracy_at_best_step')
                     for choice in (a, b))
    if first and second:
      lines.append(
          f'- {runs.compared(runs.NAMES[a], first, runs.NAMES[b], second)}.')
  return '\n'.join(lines)


def study_measure(records: list[dict], metrics: dict[str, list]) -> str:
  """How far the best test accuracy lies above test at validation's epoch."""
  gaps = [
      100 *
      (max(logged['test_accuracy']
           for logged in metrics[_run_name(r)] if 'test_accuracy' in logged) -
       r['test_accuracy_at_best_step']) for r in records
  ]
  return (f'Each run\'s best test accuracy lies {np.mean(gaps):.1f} points '
          f'above the test accuracy at the epoch validation chose, on average '
          f'over the {len(gaps)} runs here ({min(gaps):.1f} to '
          f'{max(gaps):.1f} a run).')


def choices_table(records: list[dict]) -> str:
  """Each unstated choice against the run it changes, on validation."""
  rows = []
  for choice, (model, _, base, _) in sweep.CHOICES.items():
    group, based_on = _of(records, choice), _of(records, base)
    if not group:
      continue
    rows.append([
        runs.NAMES[model],
        _described(choice),
        len(group),
        *(_mean_std(group, key)
          for key in ('best_validation_accuracy', 'test_accuracy_at_best_step',
                      'final_train_accuracy')),
        runs.compared('this', runs.by_seed(group, 'best_validation_accuracy'),
                      _described(base),
                      runs.by_seed(based_on, 'best_validation_accuracy'))
        if based_on else '', *_study_and_costs(model, group)
    ])
  return runs.markdown_table([
      'Model', 'Choice', 'Seeds', 'Validation acc at best (%)',
      'Test acc there (%)', 'Final train acc (%)',
      'On validation, against the run it changes', 'Study: best test / '
      'final train (%)', 'Training TFLOPs', 'Wall time (min)'
  ], rows)


def _gap(group: list[dict], model: str) -> float:
  """Points of mean test accuracy over the study's."""
  return 100 * (np.mean([r['test_accuracy_at_best_step']
                         for r in group]) - STUDY[model][0])


def closest(records: list[dict]) -> str:
  """Per CNN, the most-seeded choice whose test accuracy is nearest STUDY."""
  lines = []
  for model in ('simple_cnn', 'small_resnet'):
    groups = [
        _of(records, c)
        for c in (model,
                  *(c for c, (m, *_) in sweep.CHOICES.items() if m == model))
    ]
    if not any(groups):
      continue
    group = min(filter(None, groups), key=lambda g:
                (-len(g), abs(_gap(g, model))))
    gap = _gap(group, model)
    lines.append(
        f'- {runs.NAMES[model]}: {_described(group[0]["choice"])} (batch '
        f'{group[0]["batch_size"]}, {len(group)} '
        f'seed{"s" * (len(group) > 1)}): validation '
        f'{_mean_std(group, "best_validation_accuracy")}, test '
        f'{_mean_std(group, "test_accuracy_at_best_step")}, '
        f'{abs(gap):.1f} points {"over" if gap > 0 else "under"} the study\'s '
        f'{100 * STUDY[model][0]:.1f}.')
  return '\n'.join(lines)


def plot(records: list[dict], metrics: dict[str, list], path: pathlib.Path):
  """Each model's accuracies by epoch, augmented or not: seeds' mean, range."""
  plt = plotting.pyplot()
  fig, axes = plt.subplots(1, len(sweep.MODELS),
                           figsize=(5 * len(sweep.MODELS), 4), sharey=True)
  for ax, model in zip(axes, sweep.MODELS):
    for choice, label, color in ((model, 'augment', 'tab:blue'),
                                 (f'{model}_no_augment', 'no augment',
                                  'tab:orange')):
      for key, style in (('test_accuracy', '-'), ('train_accuracy', '--')):
        curves = 100 * np.asarray(
            [[logged[key] for logged in metrics[_run_name(r)] if key in logged]
             for r in _of(records, choice)])
        if not len(curves):
          continue
        epochs = np.arange(1, curves.shape[1] + 1)
        ax.plot(epochs, curves.mean(0), style, color=color,
                label=f'{label}, {key.split("_")[0]} (n={len(curves)})')
        if len(curves) > 1:
          ax.fill_between(epochs, curves.min(0), curves.max(0), color=color,
                          alpha=0.2)
    ax.axhline(100 * STUDY[model][0], color='gray', linestyle=':',
               label='study, best test')
    ax.set_title(f'{runs.NAMES[model]} ({parameter_count(model):,} params)')
    ax.set_xlabel('epoch')
    ax.grid(alpha=0.3)
  axes[0].set_ylabel('accuracy (%)')
  axes[0].legend(fontsize=8)
  fig.tight_layout()
  plotting.save_figure(fig, path)


def main(argv=None):
  runs.catch_stop_signals()
  workdir = runs.parser(__doc__, '/tmp/small_data').parse_args(argv).workdir
  records, metrics = collect(workdir)
  planned = list(sweep.planned(sweep.SEEDS))
  runs.write_summary(
      HERE, records, f'{workdir} or results.json', {
          'results table': table(records), 'study measure': study_measure(
              records, metrics), 'comparisons': comparisons(records),
          'choices table': choices_table(records), 'closest':
              closest(records), 'missing runs': runs.missing_runs(
                  planned, set(map(_run_name, records)))
      }, {
          'learning_curves.png': lambda _, path: plot(records, metrics, path),
          'metrics.jsonl': lambda _, path: path.write_text(''.join(
              json.dumps({'run': run, **r}) + '\n'
              for run, logged in metrics.items() for r in logged))
      })


if __name__ == '__main__':
  main()

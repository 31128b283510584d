"""The small-data study's results.json, metrics.jsonl, figure and README."""

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
STUDY = dict(vit=(0.4960, 0.5352), simple_cnn=(0.7080, 0.8024),
             small_resnet=(0.6330, 0.6906))


def parameter_count(model: str) -> int:
  shapes = params.param_shapes(
      models.from_config(cifar_small.get_config(model), 10), 32)
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(shapes))


# The accuracies chosen on validation, and the test accuracy at its choice.
_VALIDATION, _TEST = 'best_validation_accuracy', 'test_accuracy_at_best_step'


def _run_name(record: dict) -> str:
  return f'{record["choice"]}_seed{record["seed"]}'


def _of(records: list[dict], choice: str) -> list[dict]:
  return [r for r in records if r['choice'] == choice]


def _cells(group: list[dict], *keys: str) -> list[str]:
  return [runs.mean_std([r[key] for r in group]) for key in keys]


def _described(choice: str) -> str:
  return "the config's" if choice in sweep.MODELS else ', '.join(
      f'{k.split(".")[-1]}={v}' for k, v in sweep.CHOICES[choice][1].items())


def _study_and_costs(model: str, group: list[dict]) -> list[str]:
  """The study's accuracies, then the runs' TFLOPs and wall time."""
  study = ' / '.join(f'{100 * accuracy:.1f}' for accuracy in STUDY[model])
  return [study, runs.tflops_cell(group), runs.wall_time_cell(group)]


def table(records: list[dict]) -> str:
  """The config's runs, model by model."""
  epochs = lambda group: ', '.join(f'{r["best_epoch"]:g}' for r in group)
  return runs.markdown_table([
      'Model', 'Params', 'Batch size', 'Seeds', 'Validation acc at best (%)',
      'Test acc there (%)', 'Test acc at the end (%)', 'Final train acc (%)',
      'Best epoch (on validation)', 'Study: best test / final train (%)',
      'Training TFLOPs', 'Wall time (min)'
  ], [[
      runs.NAMES[model], f'{parameter_count(model):,}', group[0]['batch_size'],
      len(group), *_cells(group, _VALIDATION, _TEST, 'final_test_accuracy',
                          'final_train_accuracy'),
      epochs(group), *_study_and_costs(model, group)
  ] for model in sweep.MODELS if (group := _of(records, model))])


def comparisons(records: list[dict]) -> str:
  """Each CNN against the ViT, then the CNNs, on test at validation's epoch."""
  tested = lambda model: runs.by_seed(_of(records, model), _TEST)
  return '\n'.join(
      f'- {runs.compared(runs.NAMES[a], tested(a), runs.NAMES[b], tested(b))}.'
      for a, b in (('simple_cnn', 'vit'), ('small_resnet', 'vit'),
                   ('simple_cnn', 'small_resnet')) if tested(a) and tested(b))


def study_measure(records: list[dict], logs) -> str:
  """How far the best test accuracy lies above test at validation's epoch."""
  best = lambda r: max(x['test_accuracy'] for x in logs(r)
                       if 'test_accuracy' in x)
  gaps = [100 * (best(r) - r[_TEST]) for r in records]
  return (f'Each run\'s best test accuracy lies {np.mean(gaps):.1f} points '
          f'above the test accuracy at the epoch validation chose, on average '
          f'over the {len(gaps)} runs here ({min(gaps):.1f} to '
          f'{max(gaps):.1f} a run).')


def choices_table(records: list[dict]) -> str:
  """Each unstated choice against the run it changes, on validation."""
  on_validation = lambda choice: runs.by_seed(_of(records, choice), _VALIDATION)
  return runs.markdown_table([
      'Model', 'Choice', 'Seeds', 'Validation acc at best (%)',
      'Test acc there (%)', 'Final train acc (%)',
      'On validation, against the run it changes', 'Study: best test / '
      'final train (%)', 'Training TFLOPs', 'Wall time (min)'
  ], [[
      runs.NAMES[model],
      _described(choice),
      len(group), *_cells(group, _VALIDATION, _TEST, 'final_train_accuracy'),
      runs.compared('this', on_validation(choice), _described(base),
                    on_validation(base)) if _of(records, base) else '',
      *_study_and_costs(model, group)
  ] for choice, (model, _, base, _) in sweep.CHOICES.items()
      if (group := _of(records, choice))])


def closest(records: list[dict]) -> str:
  """Per model, the most-seeded choice whose validation accuracy is nearest
  the study's test accuracy: a reproduction chosen without the test set."""
  lines = []
  for model in sweep.MODELS:
    choices = [c for c, (m, *_) in sweep.CHOICES.items() if m == model]
    groups = [g for c in [model, *choices] if (g := _of(records, c))]
    if not groups:
      continue
    group = min(
        groups, key=lambda g:
        (-len(g), abs(np.mean([r[_VALIDATION] for r in g]) - STUDY[model][0])))
    # Points of mean test accuracy over the study's, and their 95% interval.
    tested = runs.by_seed(group, _TEST)
    gap, half = runs.paired(tested, dict.fromkeys(tested, STUDY[model][0]))
    validation, test = _cells(group, _VALIDATION, _TEST)
    interval = f' (± {half:.1f}, 95% interval)' if np.isfinite(half) else ''
    lines.append(
        f'- {runs.NAMES[model]}: {_described(group[0]["choice"])} (batch '
        f'{group[0]["batch_size"]}, {len(group)} seed{"s" * (len(group) > 1)}):'
        f' validation {validation}, test {test}: {gap:+.1f} points from the '
        f'study\'s {100 * STUDY[model][0]:.1f}{interval}.')
  return '\n'.join(lines)


def plot(records: list[dict], logs, path: pathlib.Path):
  """Each model's accuracies by epoch, augmented or not: seeds' mean, range."""
  fig, axes = plotting.pyplot().subplots(1, len(sweep.MODELS), sharey=True,
                                         figsize=(5 * len(sweep.MODELS), 4))
  for ax, model in zip(axes, sweep.MODELS):
    for suffix, label, color in (('', 'augment', 'tab:blue'),
                                 ('_no_augment', 'no augment', 'tab:orange')):
      for key, style in (('test_accuracy', '-'), ('train_accuracy', '--')):
        curves = 100 * np.asarray(
            [[logged[key] for logged in logs(r) if key in logged]
             for r in _of(records, model + suffix)])
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
    ax.set(title=f'{runs.NAMES[model]} ({parameter_count(model):,} params)',
           xlabel='epoch')
    ax.grid(alpha=0.3)
  axes[0].set_ylabel('accuracy (%)')
  axes[0].legend(fontsize=8)
  fig.tight_layout()
  plotting.save_figure(fig, path)


def main(argv=None):
  runs.catch_stop_signals()
  workdir = runs.parser(__doc__, '/tmp/small_data').parse_args(argv).workdir
  planned = sweep.planned()
  logs = runs.logged_metrics(HERE, workdir, planned, _run_name)
  runs.summarize(
      HERE, workdir, {
          name: {
              'model': model, 'choice': choice, 'batch_size': overrides.get(
                  'batch_size', cifar_small.MODELS[model][2])
          } for name, (choice, model, overrides) in planned.items()
      }, _run_name, _run_name, lambda records: {
          'results table': table(records), 'study measure': study_measure(
              records, logs), 'comparisons': comparisons(records),
          'choices table': choices_table(records), 'closest': closest(records)
      }, {
          'metrics.jsonl': runs.metrics_file(logs, _run_name),
          'learning_curves.png': lambda records, path: plot(
              records, logs, path)
      })


if __name__ == '__main__':
  main()

"""The data-scaling results.json, figure and README sections."""

import pathlib

import numpy as np

from experiments import runs
from experiments.data_scaling import sweep
from vit_jax.analysis import plotting

HERE = pathlib.Path(__file__).resolve().parent


def by_model_and_size(records: list[dict]) -> dict:
  """{model: {size: [best test accuracy of each seed]}}"""
  table = {}
  for r in records:
    curve = table.setdefault(r['model'], {})
    curve.setdefault(r['train_examples'], []).append(r['best_test_accuracy'])
  return table


def table(records: list[dict]) -> str:
  curves = by_model_and_size(records)
  sizes = sorted({r['train_examples'] for r in records})
  return runs.markdown_table(['Model', *(f'{s:,}' for s in sizes)], [[
      runs.NAMES[model],
      *(runs.mean_std(curves[model][s]) if s in curves[model] else 'not run yet'
        for s in sizes)
  ] for model in runs.NAMES if model in curves])


def plot(records: list[dict], path: pathlib.Path):
  fig, ax = plotting.pyplot().subplots(figsize=(6, 4))
  for model, curve in by_model_and_size(records).items():
    sizes = sorted(curve)
    means = [100 * np.mean(curve[s]) for s in sizes]
    ax.plot(sizes, means, 'o-', label=runs.NAMES[model])
  ax.set(xscale='log', xlabel='training images (log scale)',
         ylabel='best test accuracy (%), 10,000 test images',
         title='CIFAR-10, study recipe, 30 epochs')
  ax.grid(alpha=0.3, which='both')
  ax.legend()
  fig.tight_layout()
  plotting.save_figure(fig, path)


def main(argv=None):
  runs.catch_stop_signals()
  args, planned = sweep.parse(argv, __doc__, summary=True)
  runs.summarize(
      HERE, args.workdir, {
          sweep.run_name(*run): dict(model=run[0], recipe=sweep.RECIPE,
                                     train_examples=run[1]) for run in planned
      }, sweep.record_name, lambda r:
      (r['train_examples'], r['model'], r['seed']),
      lambda records: {'results table': table(records)},
      {'accuracy_vs_size.png': plot})


if __name__ == '__main__':
  main()

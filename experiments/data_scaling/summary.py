"""The data-scaling results.json, figure and README sections."""

import itertools
import math
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
    table.setdefault(r['model'],
                     {}).setdefault(r['train_examples'],
                                    []).append(r['best_test_accuracy'])
  return table


def crossovers(curves: dict) -> list[tuple[str, float]]:
  """(CNN, size) where the ViT's mean accuracy meets the CNN's, in log(size)."""
  found = []
  vit = curves.get('vit', {})
  for model, curve in curves.items():  # the ViT's own gaps are 0: no crossing
    sizes = sorted(set(vit) & set(curve))
    gaps = [np.mean(vit[s]) - np.mean(curve[s]) for s in sizes]
    for (a, ga), (b, gb) in itertools.pairwise(zip(sizes, gaps)):
      if ga < 0 <= gb:
        found.append((model, math.exp(np.interp(0, [ga, gb], np.log([a, b])))))
  return found


def table(records: list[dict]) -> str:
  curves = by_model_and_size(records)
  sizes = sorted({r['train_examples'] for r in records})
  return runs.markdown_table(['Model', *(f'{s:,}' for s in sizes)], [[
      runs.NAMES[model],
      *(runs.mean_std(curves[model][s]) if s in curves[model] else 'not run yet'
        for s in sizes)
  ] for model in runs.NAMES if model in curves])


def plot(records: list[dict], path: pathlib.Path):
  plt = plotting.pyplot()
  curves = by_model_and_size(records)
  fig, ax = plt.subplots(figsize=(6, 4))
  for model, curve in curves.items():
    sizes = sorted(curve)
    means = [100 * np.mean(curve[s]) for s in sizes]
    ax.plot(sizes, means, 'o-', label=runs.NAMES[model])
  for cnn, size in crossovers(curves):
    ax.axvline(size, color='gray', linestyle=':')
    ax.annotate(f'ViT meets {runs.NAMES[cnn]}\n~{size:,.0f}',
                (size, ax.get_ylim()[0]), fontsize=8, rotation=90, va='bottom')
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
          sweep.run_name(*run):
              {'recipe': sweep.RECIPE, 'train_examples': run[1]}
          for run in planned
      }, sweep.record_name, lambda r:
      (r['train_examples'], r['model'], r['seed']),
      lambda records: {'results table': table(records)},
      {'accuracy_vs_size.png': plot})


if __name__ == '__main__':
  main()

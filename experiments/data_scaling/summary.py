r"""The data-scaling results from the runs' workdirs and the committed
records:

  python -m experiments.data_scaling.summary --workdir=/tmp/data_scaling

writes, next to this file, `results.json` (one record per run: those
finished in --workdir, and the committed ones it lacks),
`accuracy_vs_size.png`, and the table and the runs still missing inside
`README.md`. It takes the sweep's --sizes, --models and --seeds.
"""

import math
import pathlib

import numpy as np

from experiments import runs
from experiments.data_scaling import sweep
from vit_jax.analysis import plotting

HERE = pathlib.Path(__file__).resolve().parent


def load_runs(workdir: pathlib.Path, planned: list,
              landed: dict[str, dict] | None = None) -> list[dict]:
  """The records of the `planned` runs finished in `workdir`, and of those
  in `landed` that `workdir` does not hold."""
  records = runs.load_records(
      workdir, {
          sweep.run_name(*run):
              {'recipe': sweep.RECIPE, 'train_examples': run[1]}
          for run in planned
      }, landed or {})
  return sorted(records.values(), key=lambda r:
                (r['train_examples'], r['model'], r['seed']))


def by_model_and_size(records: list[dict]) -> dict:
  """{model: {size: [best test accuracy of each seed]}}"""
  table = {}
  for r in records:
    table.setdefault(r['model'],
                     {}).setdefault(r['train_examples'],
                                    []).append(r['best_test_accuracy'])
  return table


def crossovers(curves: dict) -> list[tuple[str, float]]:
  """(CNN, training-set size) where the ViT's mean best accuracy meets the
  CNN's, interpolated linearly in log(size) between measured sizes."""
  found = []
  vit = curves.get('vit', {})
  for model, curve in curves.items():
    if model == 'vit':
      continue
    sizes = sorted(set(vit) & set(curve))
    gaps = [np.mean(vit[s]) - np.mean(curve[s]) for s in sizes]
    for (a, b), (ga, gb) in zip(zip(sizes, sizes[1:]), zip(gaps, gaps[1:])):
      if ga < 0 <= gb:
        t = -ga / (gb - ga)
        found.append((model,
                      math.exp(math.log(a) + t * (math.log(b) - math.log(a)))))
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
  ax.set_xscale('log')
  ax.set_xlabel('training images (log scale)')
  ax.set_ylabel('best test accuracy (%), 10,000 test images')
  ax.set_title('CIFAR-10, study recipe, 30 epochs')
  ax.grid(alpha=0.3, which='both')
  ax.legend()
  fig.tight_layout()
  plotting.save_figure(fig, path)


def main(argv=None):
  runs.catch_stop_signals()
  parsing = sweep.parser(__doc__, runs.parser)
  args = parsing.parse_args(argv)
  planned = sweep.planned(parsing, args)
  records = load_runs(args.workdir, planned,
                      runs.landed(HERE / 'results.json', sweep.record_name))
  runs.write_summary(
      HERE, records, f'{args.workdir} or results.json', {
          'results table': table(records), 'missing runs': runs.missing_runs(
              [sweep.run_name(*run)
               for run in planned], {sweep.record_name(r) for r in records})
      }, {'accuracy_vs_size.png': plot})


if __name__ == '__main__':
  main()

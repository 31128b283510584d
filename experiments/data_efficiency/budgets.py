"""Per budget, the study's ViT and each model's best recipe: drawn, compared."""

import pathlib
import sys

import numpy as np

from experiments import runs
from experiments.data_efficiency import recipes
from vit_jax.analysis import plotting


def best_rows(records: list[dict]) -> dict[int, dict[str, tuple]]:
  """Per budget, (recipe, runs) of 'study' and of each model's best row."""
  rows = {}
  for (epochs, model, recipe), group in recipes.group_runs(
      filter(recipes.ranked, records)).items():
    at_budget = rows.setdefault(epochs, {})
    if model == 'vit' and recipe == 'study':
      at_budget['study'] = (recipe, group)
    best = at_budget.get(model)
    if best is None or recipes.standing(group) > recipes.standing(best[1]):
      at_budget[model] = (recipe, group)
  return dict(sorted(rows.items()))


def _ingredient_lines(recipe: str) -> str:
  return '\n'.join(f'+ {ingredient}'
                   for ingredient in recipes.ingredients_of(recipe)) or recipe


def plot(records: list[dict], path: pathlib.Path):
  rows = best_rows(records)
  fig, ax = plotting.pyplot().subplots(figsize=(7, 4.5))
  lines = (('study', 'ViT-Tiny, study recipe', 'tab:gray',
            's'), ('vit', 'ViT-Tiny, best recipe', 'tab:blue', 'o'),
           ('simple_cnn', 'SimpleCNN, best recipe', 'tab:red', '^'),
           ('small_resnet', 'SmallResNet, best recipe', 'tab:green', 'v'))
  for key, label, color, marker in lines:
    if not (budgets := [epochs for epochs in rows if key in rows[epochs]]):
      continue  # no runs yet: no legend entry either
    scores = [recipes.accuracies(rows[epochs][key][1]) for epochs in budgets]
    # Each row's mean and sample std over seeds (0 for one seed).
    ax.errorbar(budgets, [s.mean() for s in scores],
                yerr=[s.std(ddof=1) if len(s) > 1 else 0 for s in scores],
                color=color, marker=marker, capsize=3, label=label)
    if key == 'vit':  # which recipe is best changes with the budget
      # Under each budget's tick, where no line runs: beside its point the
      # list crossed the CNNs' lines.
      for epochs in budgets:
        ax.annotate('best ViT:\n' + _ingredient_lines(rows[epochs][key][0]),
                    (epochs, 0), xycoords=('data', 'axes fraction'),
                    textcoords='offset points', xytext=(0, -16), ha='center',
                    va='top', fontsize=6, color=color, annotation_clip=False)
  ax.set(xscale='log', ylabel='best test accuracy (%), mean ± std over seeds',
         title='Does a pure ViT catch the CNNs with a longer budget?')
  if rows:
    ax.set_xlim(min(rows) / 1.3, max(rows) * 1.3)
  ax.set_xticks(list(rows), [str(epochs) for epochs in rows])
  ax.minorticks_off()
  # Below the tallest ingredient list.
  ax.set_xlabel(
      'training budget (epochs over the 5,000 images)', labelpad=6 + 7 * max(
          (_ingredient_lines(row['vit'][0]).count('\n') + 2
           for row in rows.values() if 'vit' in row), default=0))
  ax.legend(fontsize=8, loc='lower right')
  ax.grid(alpha=0.3)
  fig.tight_layout()
  plotting.save_figure(fig, path)


def _what_it_reads(records: list[dict], vit: list[dict]) -> list[tuple]:
  """(what, its seeds' records) of each run `vit` reads: teachers, MAE."""
  by_name = {recipes.record_name(r): r for r in records}
  read = {}
  for r in vit:
    for field, model, ingredients, epochs, seed in recipes.source_runs(
        recipes.ingredients_of(r['recipe']), r['epochs'], r['seed']):
      name = recipes.run_name(model, ingredients, epochs, seed)
      if name not in by_name:  # its cost would be left out of the chain's
        sys.exit(f'error: {recipes.record_name(r)} reads {name}, which has '
                 'no record: run it (sweep.py --missing) and summarize again.')
      role = ('is fine-tuned from' if field == 'init_from' else 'learns from')
      group = read.setdefault((role, model, ingredients, epochs), {})
      group[seed] = by_name[name]
  return [(f'the {runs.NAMES[model]} `{recipes.recipe_name(ingredients)}`' +
           (f' of {epochs} epochs' if epochs != vit[0]['epochs'] else '') +
           f' it {role}', list(group.values()))
          for (role, model, ingredients, epochs), group in read.items()]


def _cost(group: list[dict]) -> str:
  return (f'{runs.wall_time_cell(group, " min")} and '
          f'{runs.tflops_cell(group)} TFLOPs')


def named(recipe: str, untaught: str = 'a ViT no CNN touches') -> str:
  """What a ViT recipe's model is: pure at inference, but taught by a CNN?"""
  ingredients = recipes.ingredients_of(recipe)
  verbs = {'distillation': 'distilled from', 'locality_guidance': 'guided by'}
  taught = ' and '.join(verbs[name] for name in verbs if name in ingredients)
  return (f'a ViT {taught} the {runs.NAMES[recipes.teacher(ingredients)[0]]}'
          if taught else untaught)


def answer(records: list[dict]) -> str:
  """Per budget, the best ViT recipe against the best CNN, and their costs."""
  lines = []
  for epochs, row in best_rows(records).items():
    cnns = [row[model] + (model,) for model in recipes.CNNS if model in row]
    if 'vit' not in row or not cnns:
      continue
    (vit_recipe, vit), (cnn_recipe, cnn, cnn_model) = row['vit'], max(
        cnns, key=lambda c: recipes.standing(c[1]))
    by_seed = [runs.by_seed(g, 'best_test_accuracy') for g in (vit, cnn)]
    read = _what_it_reads(records, vit)
    flops = lambda group: np.mean([r['train_flops'] for r in group])
    chain = sum(map(flops, [vit] + [group for _, group in read]))
    lines.append(
        f'- {epochs} epochs: the ViT\'s best, `{vit_recipe}` '
        f'({named(vit_recipe)}), '
        f'{runs.mean_std([r["best_test_accuracy"] for r in vit], True)}, '
        f'against {runs.NAMES[cnn_model]} `{cnn_recipe}`, '
        f'{runs.mean_std([r["best_test_accuracy"] for r in cnn], True)}: '
        f'{runs.compared("the ViT", by_seed[0], runs.NAMES[cnn_model], by_seed[1])}'
        f'; per seed, {_cost(vit)} for the ViT' +
        ''.join(f', {_cost(group)} for {what}' for what, group in read) +
        ' (minutes on this 2-core CPU unless a GPU is named): the ViT\'s '
        f'chain trains {chain / 1e12:.0f} TFLOPs, {chain / flops(cnn):.1f}x '
        f'the {runs.NAMES[cnn_model]}\'s.')
  return '\n'.join(lines + [
      '', 'Every number here is chosen on the 1,000 test images it is '
      'reported on (these runs hold no validation images): each run\'s best '
      'epoch and each budget\'s best recipe, which favours the rows chosen. '
      'A difference is a per-seed paired one (each ViT beside the CNN seed '
      'it learns from, where it learns from one), with its 95% interval over '
      'seeds on this test set.'
  ])

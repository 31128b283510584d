"""What the experiment runners share: one `vit_jax.main` process per run in
its own directory (rerunning skips a finished run and resumes an interrupted
one), the record of a finished run, the records an experiment has already
committed (so a fresh machine trains only the runs they lack), and the
tables and lists of missing runs they write into their READMEs between two
markers.

The runners are scripts, not a package: they put this folder on `sys.path`
and `import runs`.
"""

import json
import os
import pathlib
import subprocess
import sys
from typing import Callable

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]


def finished(directory: pathlib.Path) -> bool:
  return (directory / 'summary.json').exists()


def train(directory: pathlib.Path, config: str, overrides: dict):
  """Trains `config` (a path under configs/, with its `:argument`) with
  `--config.KEY=VALUE` for each of `overrides` into `directory`, its output
  appended to `directory/log.txt`; nothing if the run has finished."""
  if finished(directory):
    return
  directory.mkdir(parents=True, exist_ok=True)
  print(f'training {directory.name}', flush=True)
  with open(directory / 'log.txt', 'a') as log:
    subprocess.run([
        sys.executable, '-m', 'vit_jax.main', f'--config={REPO / config}',
        f'--workdir={directory}',
        *(f'--config.{key}={value}' for key, value in overrides.items())
    ], cwd=REPO, stdout=log, stderr=subprocess.STDOUT, check=True)


def record(directory: pathlib.Path) -> dict:
  """The fields of a finished run that every experiment's results.json has
  (the runner adds `model`, `recipe` and `train_examples`)."""
  summary = json.loads((directory / 'summary.json').read_text())
  config = json.loads((directory / 'config.json').read_text())
  return {
      'epochs': round(summary['epochs']),
      'seed': config['seed'],
      'best_test_accuracy': summary['best_test_accuracy'],
      'best_epoch': summary['best_epoch'],
      'final_test_accuracy': summary['final_test_accuracy'],
      'final_train_accuracy': summary['final_train_accuracy'],
      'wall_minutes': round(summary['train_seconds'] / 60, 1),
      # Runs from before summary.json named its device ran on the project's
      # 2-core CPU machine.
      'device': summary.get('device', 'cpu'),
  }


def landed(results: pathlib.Path,
           run_name: Callable[[dict], str]) -> dict[str, dict]:
  """The records of `results` (an experiment's committed results.json) by
  run name: runs that need not train again on a machine whose workdir lacks
  them, such as a fresh one."""
  if not results.exists():
    return {}
  try:
    records = json.loads(results.read_text())
  except json.JSONDecodeError as e:
    sys.exit(f'error: {results} is not JSON ({e}); restore it with '
             f'`git checkout -- {results.name}` in its folder.')
  return {run_name(r): r for r in records}


def integers(flag: str, values: list[str], minimum: int = 1,
             multiple_of: int = 1, example: str = '') -> list[int]:
  """A list flag's values as numbers; one clear error (exit) if there is
  none, or if one is not a multiple of `multiple_of` of at least `minimum`."""
  bad = [v for v in values if not v.isdigit() or int(v) < minimum or
         int(v) % multiple_of]
  if bad or not values:
    kind = f'integers of at least {minimum}' + (
        f' that are multiples of {multiple_of}' if multiple_of > 1 else '')
    sys.exit(f'error: --{flag}={",".join(values)}: use {kind}'
             f'{", e.g. --" + flag + "=" + example if example else ""}.')
  return [int(v) for v in values]


def require_cifar10_subset(data_dir: pathlib.Path):
  if not (data_dir / 'cifar-10-batches-bin').is_dir():
    sys.exit(f'error: no cifar-10-batches-bin/ in --data_dir={data_dir}; '
             'point it at the 5k/1k CIFAR-10 subset (see the README).')


def mean_std(values, show_n: bool = False) -> str:
  """Percentages: '51.4' for one run, 'mean ± sample std' for more."""
  values = 100 * np.asarray(values)
  if len(values) == 1:
    return f'{values[0]:.1f}'
  n = f' (n={len(values)})' if show_n else ''
  return f'{values.mean():.1f} ± {values.std(ddof=1):.1f}{n}'


def wall_time_cell(records: list[dict]) -> str:
  """A table cell of the mean training minutes of `records`, per device:
  '16' on the project's CPU machine, '1.2 on H100 80GB HBM3' elsewhere."""
  by_device = {}
  for r in records:
    by_device.setdefault(r['device'], []).append(r['wall_minutes'])
  return ', '.join(
      f'{np.mean(minutes):.0f}' if device == 'cpu' else
      f'{np.mean(minutes):.1f} on {device.removeprefix("NVIDIA ")}'
      for device, minutes in by_device.items())


def write_results(folder: pathlib.Path, records):
  """`records` as the experiment's results.json in `folder`, which `landed`
  reads back."""
  write_atomically(folder / 'results.json',
                   json.dumps(records, indent=1) + '\n')


def write_atomically(path: pathlib.Path, text: str):
  """A runner killed while it writes leaves the old file or the new one,
  never half of one: results.json is what the next machine resumes from."""
  _replace(path, lambda partial: partial.write_text(text))


def save_figure(fig, path: pathlib.Path):
  """`fig` as a PNG at `path`, written as write_atomically does."""
  _replace(path, lambda partial: fig.savefig(partial, dpi=120, format='png'))


def _replace(path: pathlib.Path, write: Callable[[pathlib.Path], None]):
  partial = path.with_name(path.name + '.partial')
  write(partial)
  os.replace(partial, path)


def write_between(readme: pathlib.Path, start_marker: str, end_marker: str,
                  text: str):
  """Replaces what `readme` has between the two markers with `text`."""
  content = readme.read_text()
  start, end = content.index(start_marker), content.index(end_marker)
  write_atomically(readme, content[:start + len(start_marker)] + '\n\n' +
                   text + '\n\n' + content[end:])


MISSING_START = '<!-- missing runs: written by run.py -->'
MISSING_END = '<!-- end of missing runs -->'


def write_missing(readme: pathlib.Path, planned: list[str],
                  done: set[str]):
  """Lists in `readme`, between the MISSING markers, the runs of `planned`
  (run names, in the order the runner trains them) not in `done`."""
  missing = [name for name in planned if name not in done]
  if missing:
    text = (f'{len(missing)} of {len(planned)} planned runs, in the order '
            '`run.py` trains them:\n\n' +
            '\n'.join(f'- `{name}`' for name in missing))
  else:
    text = f'None: all {len(planned)} planned runs have finished.'
  write_between(readme, MISSING_START, MISSING_END, text)


def pyplot():
  """matplotlib's pyplot drawing to files (no display on a cluster)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
  return plt

"""What the experiment runners share: one `vit_jax.main` process per run in
its own directory (rerunning skips a finished run and resumes an interrupted
one), the record of a finished run, read from the files of its directory,
the records an experiment has already committed (so a fresh machine trains
only the runs they lack), and the results.json, figure and README sections
each runner writes beside itself.
"""

import contextlib
import json
import pathlib
import signal
import subprocess
import sys
from typing import Callable

import numpy as np

from configs import cifar_small
from vit_jax import errors
from vit_jax.runtime import files
from vit_jax.runtime import preemption
from vit_jax.runtime import stop_signals

REPO = pathlib.Path(__file__).resolve().parents[1]
# The study's models: key (configs/cifar_small.py's argument, results.json's
# `model`) -> the name the tables and figures show.
NAMES = {'vit': 'ViT-Tiny', 'simple_cnn': 'SimpleCNN',
         'small_resnet': 'SmallResNet'}
# A run's config.json names the registered model, not the key.
_KEYS = {registered: key
         for key, (registered, _) in cifar_small.MODELS.items()}
# What a runner calls a run beyond its config (its recipe, the size of its
# training set), written when it starts: config.json has no such names.
DESCRIPTION_FILE = 'run.json'


def finished(directory: pathlib.Path) -> bool:
  return (directory / 'summary.json').exists()


def model_key(config: dict) -> str:
  """The key of the model a run's config.json trains."""
  return _KEYS[config['model']]


def read_json(path: pathlib.Path):
  return json.loads(path.read_text())


def history(directory: pathlib.Path) -> list[dict]:
  """The records of a run's metrics.jsonl, in the order they were logged."""
  return [json.loads(line) for line in
          (directory / 'metrics.jsonl').read_text().splitlines()]


def train(directory: pathlib.Path, config: str, overrides: dict,
          description: dict | None = None):
  """Trains `config` (a path under configs/, with its `:argument`) with
  `--config.KEY=VALUE` for each of `overrides` into `directory`, its output
  appended to `directory/log.txt`; nothing if the run has finished. The
  runner's `description` of the run goes to its DESCRIPTION_FILE first, for
  `record`, finished or not. A run stopped by a signal (`run_to_its_end`)
  ends this process too, with its status 75 and one line; a run that fails,
  with one line naming its log."""
  directory.mkdir(parents=True, exist_ok=True)
  if description is not None:
    # Also for a run that finished before runners wrote descriptions, so
    # that `load_records` finds it.
    describe(directory, description, 'nothing was trained')
  if finished(directory):
    return
  if stop_signals.received():  # beside runs that were stopped: start none
    raise SystemExit(preemption.PREEMPTED_EXIT_STATUS)
  print(f'training {directory.name}', flush=True)
  with open(directory / 'log.txt', 'a') as log:
    status = run_to_its_end([
        sys.executable, '-m', 'vit_jax.main', f'--config={REPO / config}',
        f'--workdir={directory}',
        *(f'--config.{key}={value}' for key, value in overrides.items())
    ], log)
  if status == preemption.PREEMPTED_EXIT_STATUS:
    print(f'stopped: {directory.name} saved its step on the signal; rerun '
          'the same command to resume it.', file=sys.stderr, flush=True)
    raise SystemExit(status)
  if (status == stop_signals.INTERRUPTED_EXIT_STATUS and
      stop_signals.received()):
    # A second Ctrl-C at a terminal reaches the run itself too.
    print(f'stopped: {directory.name} was interrupted again, at once, '
          'without saving; rerun the same command to resume it from its '
          'newest complete checkpoint.', file=sys.stderr, flush=True)
    raise SystemExit(status)
  if status:
    raise SystemExit(f'error: {directory.name} stopped with exit status '
                     f'{status}; its log says why: {directory / "log.txt"}')


def describe(directory: pathlib.Path, description: dict, kept: str):
  """Writes the runner's `description` of a run (`record` reads it), or
  exits in one line saying what was `kept`."""
  try:
    files.write_atomically(directory / DESCRIPTION_FILE,
                           json.dumps(description))
  except OSError as e:  # a full or read-only disk
    sys.exit('error: ' + errors.write_failed(
        directory / DESCRIPTION_FILE, e, kept, 'another --workdir'))


def run_to_its_end(command: list[str], log) -> int:
  """Runs `command` (a `vit_jax.main`) from the repository, its output to
  `log`, and returns its exit status. A SIGTERM or Ctrl-C to this process
  goes on to it as SIGTERM (`stop_signals.sent_on_to`), so that it saves
  its step and exits 75 however the signal came (to the process group, or
  to this process alone), and this process waits for that save instead of
  ending before it. A run that finished as the signal came is stopped all
  the same: 75, so that the runner trains nothing more."""
  with contextlib.ExitStack() as stack:
    # A stop that would end this process at once waits until the child is
    # one a stop goes on to: it would be left training otherwise.
    with stop_signals.not_stopped_within():
      process = subprocess.Popen(command, cwd=REPO, stdout=log,
                                 stderr=subprocess.STDOUT)
      stack.enter_context(stop_signals.sent_on_to(process))
    status = process.wait()
    # Finished as the signal came, or signalled before it caught signals
    # (the defaults end it, with nothing to save yet; at a terminal a
    # Ctrl-C reaches it too).
    if (status in (0, -signal.SIGTERM, -signal.SIGINT) and
        stop_signals.received()):
      return preemption.PREEMPTED_EXIT_STATUS
  return status


def record(directory: pathlib.Path) -> dict:
  """A finished run as results.json holds it: its model (config.json), what
  its runner described it as, and what it measured (summary.json)."""
  summary = read_json(directory / 'summary.json')
  config = read_json(directory / 'config.json')
  return {
      'model': model_key(config),
      **read_json(directory / DESCRIPTION_FILE),
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
    records = read_json(results)
  except json.JSONDecodeError as e:
    sys.exit(f'error: {results} is not JSON ({e}); restore it with '
             f'`git checkout -- {results.name}` in its folder.')
  return {run_name(r): r for r in records}


def load_records(workdir: pathlib.Path, committed: dict[str, dict],
                 run_name: Callable[[dict], str]) -> dict[str, dict]:
  """By run name, the records of the described runs finished in `workdir`,
  and of those in `committed` (what `landed` read) that `workdir` does not
  hold. A run from before the runners described their runs is read from
  `committed` only: it landed there as it finished."""
  found = dict(committed)
  for description in sorted(workdir.glob(f'*/{DESCRIPTION_FILE}')):
    if finished(description.parent):
      run = record(description.parent)
      found[run_name(run)] = run
  return found


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


def catch_stop_signals() -> None:
  """A runner's Ctrl-C and SIGTERM, from the start of its `main`: while a
  run trains they go on to it (`run_to_its_end`); otherwise the runner
  ends at once in one line, its records as the last complete summary left
  them (`write_summary`; a summary that `side_by_side` writes is completed
  first)."""
  stop_signals.catch(
      at_once='stopped the runner; its results, figures and README are as '
      'the last complete summary left them')


def write_summary(
    folder: pathlib.Path, results, searched: str, sections: dict[str, str],
    figures: dict[str, Callable[[object, pathlib.Path], None]] | None = None):
  """`results` as folder/results.json (what `landed` reads back), drawn as
  each of `figures` (file name -> plot(results, path)) in folder, and each
  of `sections` (name -> text) between its markers in folder/README.md, as
  one set (`files.replace_together`): a failure or a stop signal leaves
  them all as they were. One clear error (exit) if there are no results,
  found in `searched`."""
  if not results:
    sys.exit(f'error: no finished runs in {searched}.')
  readme = folder / 'README.md'
  text = readme.read_text()
  for name, section in sections.items():
    text = with_section(text, name, section)
  writes = {
      folder / 'results.json':
          lambda partial: partial.write_text(_results_text(results)),
      readme: lambda partial: partial.write_text(text)}
  for name, plot in (figures or {}).items():
    writes[folder / name] = lambda partial, plot=plot: plot(results, partial)
  try:
    files.replace_together(writes)
  except OSError as e:  # a full or read-only disk
    sys.exit('error: ' + errors.write_failed(
        folder / 'results.json', e,
        'results.json, the figures and the README are as they were'))


def _results_text(results) -> str:
  return json.dumps(results, indent=1) + '\n'


def section_markers(name: str, writer: str = 'run.py') -> tuple[str, str]:
  return (f'<!-- {name}: written by {writer} -->', f'<!-- end of {name} -->')


def with_section(content: str, name: str, text: str,
                 writer: str = 'run.py') -> str:
  """`content` (a README) with what it has between the markers of section
  `name` (written by the script `writer`) replaced by `text`."""
  start_marker, end_marker = section_markers(name, writer)
  start, end = content.index(start_marker), content.index(end_marker)
  return (content[:start + len(start_marker)] + '\n\n' + text + '\n\n' +
          content[end:])


def write_section(readme: pathlib.Path, name: str, text: str,
                  writer: str = 'run.py'):
  """Replaces what `readme` has between the markers of section `name`
  (written by the script `writer`) with `text`."""
  files.write_atomically(
      readme, with_section(readme.read_text(), name, text, writer))


def cpu_minutes(records: list[dict], model: str, recipe: str,
                epochs: int) -> float | None:
  """A run's expected wall minutes on this 2-core machine: its epochs times
  the median minutes per epoch of the finished CPU runs of its model and
  recipe among `records` (of its model where its recipe has none yet);
  None where its model has none either. Measured rates only: a GPU's are
  not extrapolated."""
  on_cpu = [r for r in records if r['device'] == 'cpu' and
            r['model'] == model and r['wall_minutes'] > 0]
  same = [r for r in on_cpu if r['recipe'] == recipe] or on_cpu
  if not same:
    return None
  return epochs * float(np.median([r['wall_minutes'] / r['epochs']
                                   for r in same]))


def duration(minutes: float) -> str:
  return (f'{minutes:.0f} min' if minutes < 60 else f'{minutes / 60:.1f} h')


def missing_runs(planned: list[str], done: set[str],
                 minutes: dict[str, float | None] | None = None) -> str:
  """The 'missing runs' section: the runs of `planned` (run names, in the
  order the runner trains them) not in `done`, each with its `minutes`
  (`cpu_minutes`) where known, and their sum."""
  missing = [name for name in planned if name not in done]
  if not missing:
    return f'None: all {len(planned)} planned runs have finished.'
  minutes = minutes or {}
  known = [minutes[name] for name in missing if minutes.get(name)]
  cost = ''
  if known:
    unknown = len(missing) - len(known)
    cost = (f'; about {duration(sum(known))} on this 2-core machine'
            + (f' for the {len(known)} with a rate' if unknown else '') +
            " (each run's epochs times the median minutes per epoch of the"
            ' finished CPU runs of its model and recipe, or of its model)')

  def line(name):
    return f'- `{name}`' + (f' (about {duration(minutes[name])})'
                            if minutes.get(name) else '')

  return (f'{len(missing)} of {len(planned)} planned runs, in the order '
          f'`run.py` trains them{cost}:\n\n' +
          '\n'.join(line(name) for name in missing))

"""What the sweeps and summaries share: commands, run records, the files."""

import argparse
import json
import pathlib
import shlex
import sys
from typing import Callable

import numpy as np

from vit_jax import errors
from vit_jax.runtime import files
from vit_jax.runtime import stop_signals

REPO = pathlib.Path(__file__).resolve().parents[1]
# The study's models: key (configs/cifar_small.py's argument, results.json's
# `model`) -> the name the tables and figures show.
NAMES = dict(vit='ViT-Tiny', simple_cnn='SimpleCNN', small_resnet='SmallResNet')


def finished(directory: pathlib.Path) -> bool:
  return (directory / 'summary.json').exists()


def read_json(path: pathlib.Path):
  return json.loads(path.read_text())


def history(directory: pathlib.Path) -> list[dict]:
  """The records of a run's metrics.jsonl, in the order they were logged."""
  if not (path := directory / 'metrics.jsonl').exists():
    sys.exit(f'error: {directory} has no metrics.jsonl: copy its run whole.')
  return list(map(json.loads, path.read_text().splitlines()))


def logged_metrics(folder: pathlib.Path, workdir: pathlib.Path, names,
                   run_name: Callable) -> Callable[[dict], list]:
  """A record's logged records: its run's in `workdir`, else in `folder`."""
  metrics, committed = {}, landed(folder / 'results.json', run_name)
  for record in history(folder) if (folder / 'metrics.jsonl').exists() else []:
    # A line of an earlier run (in a record's earlier_runs) says its finished.
    name = record.pop('run')
    at = record.pop('finished', committed.get(name, {}).get('finished'))
    metrics.setdefault((name, at), []).append(record)
  for name in names:
    if finished(workdir / name):
      at = read_json(workdir / name / 'summary.json').get('finished')
      metrics[name, at] = [{k: v for k, v in r.items() if 'second' not in k}
                           for r in history(workdir / name)]
  return lambda run: metrics.get((run_name(run), run.get('finished')), [])


def metrics_file(logs: Callable[[dict], list], run_name: Callable):
  """A summary's `figures` entry: its records' runs' logs as metrics.jsonl."""
  return lambda records, path: path.write_text(''.join(
      json.dumps({'run': run_name(r), **label, **logged}) + '\n'
      for r in records
      for run, label in [(r, {})] + [(e, {'finished': e.get('finished')})
                                     for e in r.get('earlier_runs', [])]
      for logged in logs(run)))


def link(paths: list[pathlib.Path], folder: pathlib.Path):
  """`folder` with a link to each of `paths`, by name (a stale one replaced)."""
  folder.mkdir(parents=True, exist_ok=True)
  for path in paths:
    name = folder / path.name
    if name.is_symlink() and name.resolve() != path.resolve():
      name.unlink()  # to another copy, or to nothing
    if not name.exists():
      name.symlink_to(path.resolve())


def command(directory: pathlib.Path, config: str, overrides: dict) -> str:
  """The shell line that trains `config` into `directory` with `overrides`."""
  return shlex.join([
      'python', '-m', 'vit_jax.main', f'--config={config}',
      f'--workdir={directory}'
  ] + [f'--config.{k}={v}' for k, v in overrides.items()])


# The flags a sweep may take beside --workdir, by name.
_SWEEP_FLAGS = {
    'data_dir': dict(type=pathlib.Path, default='../shared/data/cifar10-5k',
                     help='The 5k/1k CIFAR-10 subset.'),
    'slurm': dict(
        type=pathlib.Path, help='Write a SLURM job array script that runs line '
        '$SLURM_ARRAY_TASK_ID of the list here, instead of printing the list.'),
    # Sweeps that read a committed results.json.
    'missing': dict(
        action='store_true', help='Only the runs the committed '
        'results.json has no record of.'),
    # Sweeps whose runs choose their best step on validation images.
    'validation_dir': dict(
        required=True, help='The held-out CIFAR-10 images '
        '(experiments.held_out).'),
}


def parser(doc: str, workdir: str, *flags: str) -> argparse.ArgumentParser:
  """A sweep's or a summary's flags: --workdir, then those of `_SWEEP_FLAGS`."""
  parsing = argparse.ArgumentParser(description=doc)
  parsing.add_argument('--workdir', type=pathlib.Path, default=workdir,
                       help='One directory per run; never committed.')
  for flag in flags:
    parsing.add_argument(f'--{flag}', **_SWEEP_FLAGS[flag])
  return parsing


def emit(commands: list[str], slurm: pathlib.Path | None):
  """Prints `commands`, or writes them to `slurm` as a job array."""
  if not commands:  # stdout stays empty: xargs would run any line
    why = 'every planned command has run, has a record or is left out'
    if slurm:
      sys.exit(f'error: nothing to write to a SLURM script: {why}.')
    sys.stderr.write(f'Nothing to run: {why}.\n')
    return
  if slurm is None:
    sys.stdout.writelines(f'{command}\n' for command in commands)
    return
  slurm.parent.mkdir(parents=True, exist_ok=True)
  # As docs/multi_host.md's job: SIGTERM 2 min before the time limit, and a
  # run stopped by it (status 75, saved) requeued to resume.
  slurm.write_text(
      f'#!/bin/bash\n#SBATCH --array=1-{len(commands)}\n#SBATCH --requeue\n'
      f'#SBATCH --signal=TERM@120\n#SBATCH --open-mode=append\ncd '
      f'{shlex.quote(str(REPO))} || exit 1\nrun=$(sed -n '
      '"${SLURM_ARRAY_TASK_ID:-0}p" 2>/dev/null <<\'RUNS\'\n' +
      '\n'.join(commands) + '\nRUNS\n)\n[ -n "$run" ] || { echo "error: no run '
      '${SLURM_ARRAY_TASK_ID:-0} in $0: submit it with sbatch." >&2; exit 1; '
      '}\nsrun bash -c "$run"\nstatus=$?\nif [ $status -eq 75 ]; then\n  '
      'scontrol requeue "${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"\nfi\n'
      'exit $status\n')
  print(f'{slurm}: {len(commands)} runs; sbatch {slurm}')


# What a record keeps of a run's summary.json, where it has them: the split
# its best evaluation was chosen on, its accuracies, compute and provenance.
_SUMMARY_FIELDS = ('chosen_on', 'best_validation_accuracy',
                   'best_test_accuracy', 'test_accuracy_at_best_step',
                   'best_epoch', 'final_validation_accuracy',
                   'final_test_accuracy', 'final_train_accuracy', 'train_flops',
                   'commit', 'cpu', 'finished', 'runs_read')

# Fields that tell two runs of one name apart.
_RUN_IDENTITY = ('finished', 'best_test_accuracy', 'test_accuracy_at_best_step',
                 'wall_minutes')


def record(directory: pathlib.Path, description: dict) -> dict:
  """A finished run as results.json holds it, with the sweep's `description`."""
  summary = read_json(directory / 'summary.json')
  config = read_json(directory / 'config.json')
  kept = {key: summary[key] for key in _SUMMARY_FIELDS if key in summary}
  minutes = round(summary['train_seconds'] / 60, 1)
  # A summary.json without a device is from the project's 2-core CPU.
  device = summary.get('device', 'cpu')
  return {
      'model': _model_of(config),
      **description, 'epochs': round(summary['epochs']), 'seed': config['seed'],
      **kept, 'wall_minutes': minutes, 'device': device
  }


def _model_of(config: dict) -> str:
  # Here, not at the top: configs import jax, which a sweep does not need.
  from configs import cifar_small  # pylint: disable=g-import-not-at-top
  return next(key for key, (registered, *_) in cifar_small.MODELS.items()
              if registered == config['model'])


def paired(a: dict[int, float], b: dict[int, float]) -> tuple[float, float]:
  """Mean per-seed a - b in points, and its 95% half-width (Student's t)."""
  from scipy import stats  # pylint: disable=g-import-not-at-top
  deltas = 100 * np.array([a[s] - b[s] for s in sorted(a.keys() & b.keys())])
  n = len(deltas)
  half = stats.t.ppf(0.975, n - 1) * stats.sem(deltas) if n > 1 else np.inf
  return float(deltas.mean()), float(half)


def by_seed(records: list[dict], key: str) -> dict[int, float]:
  return {r['seed']: r[key] for r in records}


def compared(name_a: str, a: dict, name_b: str, b: dict) -> str:
  """`paired` in words: better by X ± Y, or indistinguishable within ± Y."""
  if not a.keys() & b.keys():
    return 'no seed of both: no comparison'
  mean, half = paired(a, b)
  if len(a.keys() & b.keys()) < 2:
    return f'{mean:+.1f} points at one seed: no interval'
  seeds = f'95% interval, {len(a.keys() & b.keys())} paired seeds'
  if round(abs(mean), 1) <= round(half, 1):  # as the words print them
    return (f'{name_a} and {name_b} are indistinguishable within ±{half:.1f} '
            f'points ({mean:+.1f}; {seeds})')
  better, worse = (name_a, name_b) if mean > 0 else (name_b, name_a)
  return (f'{better} is better than {worse} by {abs(mean):.1f} ± {half:.1f} '
          f'points ({seeds})')


def landed(results: pathlib.Path, run_name: Callable) -> dict[str, dict]:
  """The records of a committed results.json, by `run_name`."""
  if not results.exists():
    return {}
  try:
    return {run_name(r): r for r in read_json(results)}
  except json.JSONDecodeError as e:
    sys.exit(f'error: {results} is not JSON ({e}); restore it with '
             f'`git checkout -- {results.name}` in its folder.')


def unplanned(directory: pathlib.Path, fresh: dict, description: dict) -> str:
  """How the finished run in `directory` is not the one planned there, or ''."""
  config = read_json(directory / 'config.json')
  if steps := config.get('total_steps'):
    return f'as it ran config.total_steps={steps}, which no sweep sets'
  # A sweep that plans no epochs runs configs/cifar_small.py's: a run of
  # others is a trial's (--config.num_epochs).
  from configs import cifar_small  # pylint: disable=g-import-not-at-top
  planned = {'epochs': cifar_small.get_config().num_epochs, **description}
  # The run's, not the plan's.
  ran = dict(fresh, model=_model_of(config),
             batch_size=config.get('batch_size'))
  return next((f'as its {key} is {ran[key]}, not the {value} planned'
               for key, value in planned.items() if ran[key] != value), '')


def load_records(workdir: pathlib.Path, planned: dict[str, dict],
                 results: pathlib.Path, run_name: Callable) -> dict[str, dict]:
  """`planned` runs by name, from `workdir` else `results` (+ earlier_runs)."""
  found = landed(results, run_name)
  if not workdir.is_dir():
    sys.stderr.write(f'{workdir}: no such folder; the committed records alone '
                     'are summarized.\n')
  for name, description in planned.items():
    if finished(workdir / name):
      fresh, earlier = record(workdir / name, description), found.get(name, {})
      if why := unplanned(workdir / name, fresh, description):
        why += "; its sweep's command in a new workdir runs it as planned"
      # A copy of a run the committed one replaced, gathered from another
      # machine, leaves the committed record as it is.
      elif fresh.get('finished', '') < earlier.get('finished', ''):
        why = 'as a later run of it is committed'
      if why:
        print(f'{workdir / name}: left out, {why}.', file=sys.stderr)
        continue
      # Its committed record, if another run, joins the earlier ones kept.
      before = earlier.pop('earlier_runs', [])
      if earlier and any(earlier[k] != fresh[k]
                         for k in _RUN_IDENTITY if k in earlier and k in fresh):
        before.append(earlier)
      found[name] = {**fresh, **({'earlier_runs': before} if before else {})}
  # A run stands only beside the runs it read (its teachers, its
  # pre-training) as it read them: finished, not trained again since.
  for name in list(found):
    if why := read_again(lambda run: found.get(run, {}), name):
      print(f'{workdir / name}: left out, as {why}.', file=sys.stderr)
      del found[name]
  return found


def read_again(record: Callable[[str], dict], name: str) -> str:
  """How `record(name)` read a run unfinished or trained again since, or ''."""
  for source in record(name).get('runs_read', {}).values():
    theirs, read = source['workdir'].split('/')[-1], source.get('finished')
    here = record(theirs).get('finished') or read
    if read is None or here != read:
      return f'it read {theirs} ' + (
          f'finished at {read}, which finished again at {here}'
          if read else f'before {theirs} finished')
  return ''


def integers(text: str) -> list[int]:
  """An argparse type: comma-separated integers."""
  values = text.split(',')
  if (not all(v.isdigit() for v in values) or
      len(set(map(int, values))) != len(values)):  # a seed twice counts twice
    raise argparse.ArgumentTypeError(
        f'{text!r}: use distinct integers separated by commas, e.g. 0,1,2')
  return [int(v) for v in values]


def require_cifar10_subset(data_dir: pathlib.Path, flag: str):
  if not (data_dir / 'cifar-10-batches-bin').is_dir():
    sys.exit(f'error: no cifar-10-batches-bin/ in {flag}={data_dir}; '
             'point it at the 5k/1k CIFAR-10 subset (see the README).')


def mean_std(values, show_n: bool = False) -> str:
  """Percentages: '51.4' for one run, 'mean ± sample std' for more."""
  values = 100 * np.asarray(values)
  if len(values) == 1:
    return f'{values[0]:.1f}'
  n = f' (n={len(values)})' if show_n else ''
  return f'{values.mean():.1f} ± {values.std(ddof=1):.1f}{n}'


def wall_time_cell(records: list[dict], unit: str = '') -> str:
  """Mean training minutes per device: '16' (CPU), '1.2 on H100 80GB HBM3'."""
  by_device = {}
  for r in records:
    by_device.setdefault(r['device'], []).append(r['wall_minutes'])
  return ', '.join(
      f'{np.mean(minutes):.0f}{unit}' if device == 'cpu' else
      f'{np.mean(minutes):.1f}{unit} on {device.removeprefix("NVIDIA ")}'
      for device, minutes in by_device.items())


def tflops_cell(records: list[dict]) -> str:
  """Mean training TFLOPs of the runs that counted theirs."""
  counted = [r['train_flops'] for r in records if 'train_flops' in r]
  return f'{np.mean(counted) / 1e12:.0f}' if counted else ''


def catch_stop_signals() -> None:
  stop_signals.catch(at_once='stopped the summary; its results, figures '
                     'and README are as the last complete summary left them')


def write_summary(folder: pathlib.Path, results, searched: str,
                  sections: Callable, figures: dict | None = None):
  """Writes results.json, README `sections(results)` and figures, or none."""
  if not results:
    sys.exit(f'error: no finished runs in {searched}.')
  sections = sections(results)
  readme = folder / 'README.md'
  text = readme.read_text()
  for name, section in sections.items():
    text = with_section(text, name, section)
  writes = {
      folder / 'results.json': lambda partial: partial.write_text(
          json.dumps(results, indent=1) + '\n'),
      readme: lambda partial: partial.write_text(text)
  }
  for name, plot in (figures or {}).items():
    writes[folder / name] = lambda partial, plot=plot: plot(results, partial)
  try:
    files.replace_together(writes)
  except OSError as e:  # a full or read-only disk
    sys.exit('error: ' + errors.write_failed(
        folder / 'results.json', e,
        'results.json, the figures and the README are as they were'))
  print('\n\n'.join(sections.values()))


def markdown_table(header: list[str], rows: list[list]) -> str:
  return '\n'.join(
      ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)] +
      ['| ' + ' | '.join(map(str, row)) + ' |' for row in rows])


def section_markers(name: str, writer: str = 'summary.py') -> tuple[str, str]:
  return (f'<!-- {name}: written by {writer} -->', f'<!-- end of {name} -->')


def with_section(content: str, name: str, text: str,
                 writer: str = 'summary.py') -> str:
  start_marker, end_marker = section_markers(name, writer)
  start, end = content.index(start_marker), content.index(end_marker)
  return (content[:start + len(start_marker)] + '\n\n' + text + '\n\n' +
          content[end:])


def write_section(readme: pathlib.Path, name: str, text: str, writer: str):
  files.write_atomically(readme,
                         with_section(readme.read_text(), name, text, writer))


def missing_runs(planned: list[str], done: set[str]) -> str:
  """The README's list of the `planned` runs not in `done`."""
  missing = [name for name in planned if name not in done]
  if not missing:
    return f'None: all {len(planned)} runs of the sweep have a record.'
  return (f'{len(missing)} of the {len(planned)} runs of the sweep have no '
          'record yet:\n\n' + '\n'.join(f'- `{name}`' for name in missing))


def summarize(folder: pathlib.Path, workdir: pathlib.Path, planned: dict,
              run_name: Callable, order: Callable, sections: Callable,
              figures: dict | None = None):
  """Writes the `planned` runs' records in `order`, `sections`, the missing."""
  found = load_records(workdir, planned, folder / 'results.json', run_name)
  missing = {'missing runs': missing_runs(list(planned), set(found))}
  records = sorted(found.values(), key=order)
  write_summary(folder, records, f'{workdir} or results.json',
                lambda records: {**sections(records), **missing}, figures)

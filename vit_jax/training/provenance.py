"""Where a run's results come from (commit, machine, date, runs read)."""

import contextlib
import datetime
import os
import pathlib
import platform
import subprocess

from vit_jax import errors
from vit_jax.runtime import files

# The config fields that may name a run this run reads, and what it records
# of each such run's own summary.
_RUNS_READ = ('distillation_teacher', 'locality_guidance_teacher', 'init_from')
_OF_RUN_READ = ('chosen_on', 'best_step', 'best_validation_accuracy',
                'best_test_accuracy', 'test_accuracy_at_best_step', 'commit',
                'finished')


def _git(*args: str) -> str:
  return subprocess.run(['git', *args], cwd=pathlib.Path(__file__).parent,
                        capture_output=True, text=True, check=True,
                        timeout=30).stdout.strip()


def commit() -> str | None:
  """The checkout's commit ('+changes' if files differ), else None."""
  try:
    head = _git('rev-parse', 'HEAD')
    changed = _git('status', '--porcelain', '--untracked-files=no')
  except (OSError, subprocess.SubprocessError):
    return None
  return head + ('+changes' if changed else '')


def cpu() -> str:
  """The CPU's model and this machine's core count."""
  model = platform.processor() or platform.machine()
  with contextlib.suppress(OSError), open('/proc/cpuinfo') as f:
    model = next((line.split(':', 1)[1].strip()
                  for line in f if line.startswith('model name')), model)
  return f'{model}, {os.cpu_count()} cores'


def _run_read(source: str) -> pathlib.Path | None:
  """The workdir of `source` if it names a run, not a released checkpoint."""
  # Here, not at the top: the timm worker's Python, which has no jax, imports
  # this module.
  from vit_jax.checkpoints import reading  # pylint: disable=g-import-not-at-top
  with contextlib.suppress(errors.CheckpointError):  # moved since it was read
    if source and reading.source_kind(source) == reading.WORKDIR:
      return reading.run_directory(source)
  return None


def runs_read(config) -> dict:
  """What the runs this run reads (teachers, init_from) are as it reads them."""
  read = {}
  for field in _RUNS_READ:
    if (run := _run_read(config[field])) is None:
      continue
    theirs = files.read_json(run / 'summary.json')[0] or {}  # {}: unfinished
    read[field] = {'workdir': str(run)}
    if 'teacher' in field:
      read[field]['checkpoint'] = ('best' if run != pathlib.Path(config[field])
                                   else config.teacher_checkpoint)
    read[field].update({k: theirs[k] for k in _OF_RUN_READ if k in theirs})
  return read


def describe(read: dict, code: str | None) -> dict:
  """This run's provenance: `code`, its commit at start; `read`, runs_read's."""
  now = datetime.datetime.now(datetime.timezone.utc)
  return dict(commit=code, cpu=cpu(),
              finished=now.isoformat(timespec='seconds'),
              **({'runs_read': read} if read else {}))

"""Where a run's results come from (commit, machine, date, teachers)."""

import contextlib
import datetime
import os
import pathlib
import platform
import subprocess

from vit_jax.runtime import files

_TEACHERS = ('distillation_teacher', 'locality_guidance_teacher')
# What a student records of each teacher's own summary.
_OF_TEACHER = ('chosen_on', 'best_step', 'best_validation_accuracy',
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


def describe(config) -> dict:
  """This run's provenance, as it finishes training."""
  teachers = {}
  for field in _TEACHERS:
    if config[field]:
      theirs = files.read_json(
          pathlib.Path(config[field]) / 'summary.json')[0] or {}
      teachers[field] = {
          'workdir': str(config[field]),
          'checkpoint': config.teacher_checkpoint,
          **{k: theirs[k] for k in _OF_TEACHER if k in theirs}
      }
  return {
      'commit': commit(), 'cpu': cpu(), 'finished': datetime.datetime.now(
          datetime.timezone.utc).isoformat(timespec='seconds'),
      **({'teachers': teachers} if teachers else {})
  }

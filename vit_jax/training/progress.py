"""What a run reports as it goes: start-up, throughput, ETA, progress line."""

import contextlib
import os
import time

from vit_jax.training import plan as plan_lib


def _format_duration(seconds: float) -> str:
  hours, rest = divmod(int(seconds), 3600)
  minutes, seconds = divmod(rest, 60)
  return (f'{hours}:{minutes:02d}:{seconds:02d}'
          if hours else f'{minutes}:{seconds:02d}')


def _format_flops(value: float) -> str:
  for unit, scale in (('PFLOP/s', 1e15), ('TFLOP/s', 1e12), ('GFLOP/s', 1e9)):
    if value >= scale:
      return f'{value / scale:.2f} {unit}'
  return f'{value / 1e6:.0f} MFLOP/s'


def progress_line(record: dict, plan: plan_lib.StepPlan,
                  eta_seconds: float) -> str:
  """One logged record as a line, with the ETA."""
  step, epoch = record['step'], record['epoch']
  parts = [f'step {step}/{plan.total_steps} (epoch {epoch:g})']
  for split in ('train', 'validation', 'test'):
    if f'{split}_loss' in record:
      parts.append(f'{split} loss {record[f"{split}_loss"]:.4f} acc '
                   f'{100 * record[f"{split}_accuracy"]:.2f}%')
  if 'train_loss' in record:
    throughput = (f'lr {record["learning_rate"]:.2e}  '
                  f'{record["images_per_second"]:.0f} img/s  '
                  f'{_format_flops(record["flops_per_second"])}')
    if 'peak_share' in record:
      throughput += f' ({100 * record["peak_share"]:.0f}% of peak)'
    parts.append(throughput)
  parts.append(f'ETA {_format_duration(eta_seconds)}')
  return '  '.join(parts)


class StartupClock:
  """The seconds of each start-up phase, `imports` from the process's start."""

  def __init__(self):
    self._last, self.phases = time.perf_counter(), {}
    try:  # the wall seconds since this process started (Linux)
      with open('/proc/self/stat') as stat, open('/proc/uptime') as uptime:
        # Field 22, the start in clock ticks after boot; the name before it,
        # in parentheses, may hold spaces.
        started = int(stat.read().rsplit(')', 1)[1].split()[19])
        age = float(
            uptime.read().split()[0]) - started / os.sysconf('SC_CLK_TCK')
      self.phases['imports'] = round(age, 3)
    except (OSError, ValueError, IndexError):
      pass

  def line(self) -> str:
    return f'Started in {sum(self.phases.values()):.1f} s: ' + ', '.join(
        f'{phase} {seconds:.1f} s' for phase, seconds in self.phases.items())

  def lap(self, phase: str):
    """Adds to `phase` the seconds since the previous lap (or the start)."""
    now = time.perf_counter()
    self.phases[phase] = round(self.phases.get(phase, 0) + now - self._last, 3)
    self._last = now


# Phases of the loop whose time is not training's.
_NOT_TRAINING = ('evaluation', 'checkpoint')


class Throughput:
  """Images/s, FLOP/s, the ETA, and where each record's wall seconds went."""

  def __init__(self, start_step: int, batch_size: int,
               train_flops_per_image: float, peak: float | None):
    now = time.perf_counter()
    self._loop_start = self._interval_start = self._last_record = now
    self._start_step = self._interval_step = start_step
    self._batch_size, self._peak = batch_size, peak
    self._flops_per_image = train_flops_per_image
    self._excluded, self._phases = 0.0, {}

  @contextlib.contextmanager
  def timed(self, phase: str):
    """A block of `phase`; `_NOT_TRAINING`'s are left out of images/s."""
    start = time.perf_counter()
    try:
      yield
    finally:
      seconds = time.perf_counter() - start
      self._phases[phase] = self._phases.get(phase, 0.0) + seconds
      if phase in _NOT_TRAINING:
        self._excluded += seconds

  def interval(self, step: int) -> dict:
    """Over the steps this process trained since the last call."""
    now = time.perf_counter()
    seconds = max(now - self._interval_start - self._excluded, 1e-9)
    rate = (step - self._interval_step) * self._batch_size / seconds
    self._interval_start, self._interval_step, self._excluded = now, step, 0.0
    measured = dict(images_per_second=rate,
                    flops_per_second=rate * self._flops_per_image)
    if self._peak:
      measured['peak_share'] = measured['flops_per_second'] / self._peak
    return measured

  def since_last_record(self) -> dict:
    """Wall seconds since the previous record, and each phase's share."""
    now = time.perf_counter()
    seconds, self._last_record = now - self._last_record, now
    phases, self._phases = self._phases, {}
    phases['other'] = seconds - sum(phases.values())
    return dict(seconds=seconds,
                phase_seconds={k: round(v, 4) for k, v in phases.items()})

  def eta(self, step: int, total_steps: int) -> float:
    elapsed = time.perf_counter() - self._loop_start
    return elapsed / max(step - self._start_step, 1) * (total_steps - step)

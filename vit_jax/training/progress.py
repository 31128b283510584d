"""What the loop reports as it goes: images/s, FLOP/s and the ETA
(`Throughput`), and the progress line it logs after each record."""

import contextlib
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
  parts = [
      f'step {record["step"]}/{plan.total_steps} (epoch '
      f'{record["epoch"]:g})'
  ]
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


class Throughput:
  """Training images/s and FLOP/s over each logging interval, evaluations
  and saves left out; the ETA from the pace since the loop (re)started."""

  def __init__(self, start_step: int, batch_size: int,
               train_flops_per_image: float, peak: float | None):
    self._loop_start = self._interval_start = time.perf_counter()
    self._start_step = self._interval_step = start_step
    self._batch_size = batch_size
    self._excluded = 0.0
    self._flops_per_image = train_flops_per_image
    self._peak = peak
    self._last_record = self._loop_start

  @contextlib.contextmanager
  def excluded(self):
    """A block whose time (an evaluation, a save) is not training's."""
    start = time.perf_counter()
    try:
      yield
    finally:
      self._excluded += time.perf_counter() - start

  def interval(self, step: int) -> dict:
    """Over the steps this process trained since the last call."""
    now = time.perf_counter()
    seconds = max(now - self._interval_start - self._excluded, 1e-9)
    images = (step - self._interval_step) * self._batch_size
    self._interval_start, self._interval_step = now, step
    self._excluded = 0.0
    rate = images / seconds
    measured = {
        'images_per_second': rate,
        'flops_per_second': rate * self._flops_per_image
    }
    if self._peak:
      measured['peak_share'] = measured['flops_per_second'] / self._peak
    return measured

  def since_last_record(self) -> float:
    """Wall seconds since the previous record, all phases alike."""
    now = time.perf_counter()
    seconds, self._last_record = now - self._last_record, now
    return seconds

  def eta(self, step: int, total_steps: int) -> float:
    done = step - self._start_step
    elapsed = time.perf_counter() - self._loop_start
    return elapsed / max(done, 1) * (total_steps - step)

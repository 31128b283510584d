r"""Where the study ViT's train step spends its time on this machine: the
table of the benchmarks README's "Where the time goes".

  python experiments/benchmarks/profile_step.py [--cpu_devices=4] [--steps=3]

Runs `vit_jax.benchmark`'s train step (ViT-Tiny-CIFAR_4, batch 128,
augmented), records a `jax.profiler` trace of --steps steps with XLA's
per-operation events on (`--xla_cpu_enable_xprof_traceme`), and sums the
events of the threads that run XLA's operations by kind of work, each event
counted for its own time (its nested events subtracted). Prints thread-ms per
step against the step's wall time. With one device the threads run on the 2
cores and add up to at most 2 x wall; with 4 devices on 2 cores each device
has its own thread and they share the cores, so an operation's time includes
the slices it waited for a core, and the sum can reach 4 x wall.
"""

import argparse
import collections
import gzip
import json
import os
import pathlib
import re
import tempfile

# Kinds of work, by XLA's names for its thunks; the first match wins.
KINDS = (
    ('matmuls (YNNPACK kernels)', re.compile(r'^ynn_fusion')),
    ('gradient all-reduce', re.compile(r'all-reduce|collective')),
    ('waits for other threads (rendezvous)', re.compile(r'^Wait', re.I)),
    ('layout copies', re.compile(r'copy|transpose')),
    ('dropout selects, GELU', re.compile(r'select|tanh')),
    ('batched attention dots', re.compile(r'^dot')),
)
OTHER = 'other elementwise and reductions'
# The threads that run the compiled step's operations, one or more per
# device (the PjRt client's threads only wait for them).
WORKER_THREADS = re.compile(r'^tf_XLAEigen')


def self_times(events: list[dict]) -> list[tuple[str, float]]:
  """(name, microseconds not spent in nested events) for one thread's
  complete events."""
  events = sorted(events, key=lambda e: (e['ts'], -e['dur']))
  result = []
  stack = []  # [name, end, self time]
  for event in events:
    while stack and event['ts'] >= stack[-1][1]:
      name, _, own = stack.pop()
      result.append((name, own))
    if stack:
      stack[-1][2] -= event['dur']
    stack.append([event['name'], event['ts'] + event['dur'], event['dur']])
  result.extend((name, own) for name, _, own in stack)
  return result


def summarize(trace_path: pathlib.Path, steps: int) -> dict[str, float]:
  """Milliseconds per step: each kind of work summed over XLA's threads, and
  the wall time from the first event on them to the last."""
  with gzip.open(trace_path) as f:
    events = json.load(f)['traceEvents']
  workers = {e['tid'] for e in events
             if e.get('name') == 'thread_name' and
             WORKER_THREADS.match(e['args']['name'])}
  by_thread = collections.defaultdict(list)
  for e in events:
    if e.get('ph') == 'X' and e.get('tid') in workers:
      by_thread[e['tid']].append(e)
  kinds = collections.Counter()
  for thread_events in by_thread.values():
    for name, own in self_times(thread_events):
      kind = next((k for k, pattern in KINDS if pattern.search(name)), OTHER)
      kinds[kind] += own
  spans = [e for thread_events in by_thread.values() for e in thread_events]
  wall = (max(e['ts'] + e['dur'] for e in spans) -
          min(e['ts'] for e in spans))
  table = {kind: kinds[kind] / 1e3 / steps for kind, _ in KINDS}
  table[OTHER] = kinds[OTHER] / 1e3 / steps
  table['sum over threads'] = sum(kinds.values()) / 1e3 / steps
  table['wall'] = wall / 1e3 / steps
  return table


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--cpu_devices', type=int, default=4)
  parser.add_argument('--steps', type=int, default=3)
  args = parser.parse_args()
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                             ' --xla_cpu_enable_xprof_traceme=true')
  from vit_jax import parallel  # pylint: disable=g-import-not-at-top
  parallel.set_cpu_devices(args.cpu_devices)
  from vit_jax import benchmark  # pylint: disable=g-import-not-at-top

  with tempfile.TemporaryDirectory() as trace_dir:
    result = benchmark.run_benchmark(
        model='ViT-Tiny-CIFAR_4', batch_size=128, image_size=32,
        steps_timed=5, augment=True, trace_dir=trace_dir,
        trace_steps=args.steps)
    trace_path = next(pathlib.Path(trace_dir).rglob('perfetto_trace.json.gz'))
    table = summarize(trace_path, args.steps)
  print(f'{args.cpu_devices} host devices; untraced step '
        f'{result["train_ms_per_step"]:.0f} ms '
        f'({result["train_images_per_second"]:.1f} img/s)\n')
  print('| work | thread-ms per step |')
  print('| --- | ---: |')
  for kind, ms in table.items():
    print(f'| {kind} | {ms:,.0f} |')


if __name__ == '__main__':
  main()

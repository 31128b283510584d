"""Where a train step's time goes: a trace summed by kind and by model part."""

import collections
import gzip
import json
import pathlib
import re

from experiments import runs
from experiments.benchmarks import hlo_parts
from experiments.benchmarks import study_step
from vit_jax.training import step_benchmark

# Kinds of work, by XLA's names for its thunks (regular expressions); the
# first match wins.
KINDS = {
    'matmuls (YNNPACK kernels)': r'^ynn_fusion',
    'gradient all-reduce': r'all-reduce|collective',
    'waits for other threads (rendezvous)': r'(?i)^Wait',
    'layout copies': r'copy|transpose', 'dropout selects, GELU': r'select|tanh',
    'batched attention dots': r'^dot'
}
OTHER = 'other elementwise and reductions'
# The threads that run the compiled step's operations, one or more per
# device; the PjRt client's thread runs some itself between its waits (in a
# trace of SimpleCNN's step on a 2-core CPU, its first six), and of its events
# only the operations count, not the runtime's spans (`A::B`).
WORKER_THREADS, CLIENT_THREADS = 'tf_XLAEigen', 'tf_XLAPjRtCpuClient'


def self_times(events: list[dict]) -> list[tuple[str, float]]:
  """(name, microseconds not spent in nested events) of one thread's events."""
  result, stack = [], []  # stack: [name, end, self time]
  for event in sorted(events, key=lambda e: (e['ts'], -e['dur'])):
    while stack and event['ts'] >= stack[-1][1]:
      name, _, own = stack.pop()
      result.append((name, own))
    if stack:
      stack[-1][2] -= event['dur']
    stack.append([event['name'], event['ts'] + event['dur'], event['dur']])
  result.extend((name, own) for name, _, own in stack)
  return result


def trace_events(trace_dir: pathlib.Path) -> list[dict]:
  """The events of the newest trace in `trace_dir`; none without one."""
  newest = max(trace_dir.rglob('perfetto_trace.json.gz'), default=None,
               key=lambda path: path.stat().st_mtime)
  return json.loads(gzip.decompress(
      newest.read_bytes()))['traceEvents'] if newest else []


def thread_profile(events: list[dict], steps: int,
                   parts: dict[str, hlo_parts.Part]) -> tuple[dict, dict]:
  """Thread-ms per step of XLA's CPU operations by kind (KINDS) and by part."""
  threads = {
      e['tid']: e['args']['name'] for e in events
      if e.get('name') == 'thread_name'
  }
  by_thread = collections.defaultdict(list)  # XLA's operations' events
  for e in events:
    thread = threads.get(e.get('tid'), '')
    if e.get('ph') == 'X' and (thread.startswith(WORKER_THREADS) or
                               (thread.startswith(CLIENT_THREADS) and
                                '::' not in e['name'])):
      by_thread[e['tid']].append(e)
  if not by_thread:
    return {}, {}
  timed = [(_kind(KINDS, name), parts.get(name), own)
           for thread_events in by_thread.values()
           for name, own in self_times(thread_events)]
  spans = [e for thread_events in by_thread.values() for e in thread_events]
  return _per_step(timed, KINDS, spans, steps, 'sum over threads', 'wall')


def _kind(kinds: dict[str, str], text: str) -> str:
  return next((k for k, pattern in kinds.items() if re.search(pattern, text)),
              OTHER)


def _per_step(timed, order, spans: list[dict], steps: int, summed: str,
              wall: str) -> tuple[dict, dict]:
  """(kind, part, us) as ms per step by kind (`order`, OTHER, sums) and part."""
  kinds, by_part = collections.Counter(), collections.Counter()
  for kind, where, us in timed:
    kinds[kind] += us
    by_part[where.label if where else hlo_parts.UNNAMED] += us
  span = (max(e['ts'] + e['dur'] for e in spans) - min(e['ts'] for e in spans))
  kinds[summed], kinds[wall] = sum(kinds.values()), span
  table = {k: kinds[k] / 1e3 / steps for k in (*order, OTHER, summed, wall)}
  return table, {label: us / 1e3 / steps for label, us in by_part.most_common()}


# Kinds of a GPU step's kernels, by their names and the XLA and jax op names
# the trace gives them (`steps` scopes the optimizer's update as
# 'optimizer'); the first match wins. Attention: flash attention's kernels,
# and the cuDNN fusions of its backward pass; convolutions: cuDNN's, by their
# XLA custom call (the patch embedding's).
DEVICE_KINDS = {
    'attention (cuDNN)': r'(?i)sdpa|fmha|flash|cudnn::fusion',
    'convolutions': r'(?i)cudnn-conv|implicit_gemm',
    'matmuls': r'(?i)gemm|nvjet|cublas|cutlass|xmma|wgmma|matmul|\bdot',
    'optimizer update': r'optimizer',
    'layer norms and other reductions': r'(?i)reduce|norm',
    'copies and transposes': r'(?i)copy|transpose|memcpy|memset',
    'other fusions': r'(?i)fusion|loop'
}


def _device_kernels(events: list[dict]) -> list[dict]:
  """The accelerators' kernels, on their 'Stream' threads if any (CPU: none)."""
  # The other threads repeat the streams' kernels as XLA modules, ops or
  # scopes.
  devices = {
      e['pid'] for e in events
      if e.get('ph') == 'M' and e.get('name') == 'process_name' and
      '/device:' in e['args'].get('name', '') and 'CPU' not in e['args']['name']
  }
  kernels = [e for e in events if e.get('ph') == 'X' and e['pid'] in devices]
  streams = {
      (e['pid'], e['tid']) for e in events
      if e.get('ph') == 'M' and e.get('name') == 'thread_name' and
      e['pid'] in devices and e['args'].get('name', '').startswith('Stream')
  }
  return [e for e in kernels if (e['pid'], e['tid']) in streams] or kernels


def _part_of(kernel: dict,
             parts: dict[str, hlo_parts.Part]) -> hlo_parts.Part | None:
  """The part a kernel computes: its HLO op's, its name's, else its jax op's."""
  args = kernel.get('args', {})
  # The HLO op first: XLA names a kernel it reuses for identical fusions
  # after the first of them. (A command buffer, which holds many, is no
  # instruction of `parts`.)
  for instruction in (args.get('hlo_op'), kernel['name']):
    if instruction in parts:
      return parts[instruction]
  return hlo_parts.part(args['tf_op']) if args.get('tf_op') else None


def device_profile(
    events: list[dict], steps: int, parts: dict[str, hlo_parts.Part],
    top: int = 25) -> tuple[dict[str, float], dict[str, float], list[dict]]:
  """Kernel ms per step by kind and by part, and the `top` kernels."""
  if not (kernels := _device_kernels(events)):
    return {}, {}, []
  by_name, timed, described = collections.Counter(), [], {}
  computes = collections.defaultdict(collections.Counter)  # by part's label
  labelled = {}  # a label's part, as first seen
  for e in kernels:
    args = e.get('args', {})
    kind = _kind(DEVICE_KINDS, ' '.join([e['name'], *map(str, args.values())]))
    where = _part_of(e, parts)
    timed.append((kind, where, e['dur']))
    by_name[e['name']] += e['dur']
    described.setdefault(
        e['name'],
        {'kind': kind, 'args': {k: str(v)[:200] for k, v in args.items()}})
    if where:
      computes[e['name']][where.label] += e['dur']
      labelled.setdefault(where.label, where)
  for name, by_label in computes.items():
    (most, _), *others = by_label.most_common()
    described[name]['computes'] = labelled[most].described + (
        f' (and {len(others)} more)' if others else '')
  kinds, by_part = _per_step(timed, DEVICE_KINDS, kernels, steps,
                             'kernels, summed', 'wall, first kernel to last')
  return kinds, by_part, [{
      'kernel': name, 'ms_per_step': us / 1e3 / steps, **described[name]
  } for name, us in by_name.most_common(top)]


def tables(kinds: dict[str, float], by_part: dict[str, float] | str | None,
           heaviest: list[dict], unit: str = 'ms per step', shown: int = 15,
           top: int = 12) -> list[str]:
  """A profile's tables: by kind, by part (`shown` of them), `top` kernels."""
  rows = [[kind, f'{ms:,.2f}'] for kind, ms in kinds.items()]
  lines = ['', runs.markdown_table(['kind of work', unit], rows)]
  if isinstance(by_part, str):
    lines += ['', f'By part of the model: not measured: {by_part}']
  elif by_part:
    ranked = sorted(by_part.items(), key=lambda item: -item[1])
    if len(ranked) > shown:
      ranked[shown:] = [(f'the other {len(ranked) - shown} parts',
                         sum(ms for _, ms in ranked[shown:]))]
    rows = [[label, f'{ms:,.2f}'] for label, ms in ranked]
    lines += ('', 'By part of the model, as the compiled program\'s metadata '
              'names the flax module and pass (encoder blocks summed):', '',
              runs.markdown_table(['part of the model', unit], rows))
  if heaviest:
    rows = [[
        f'`{k["kernel"][:80]}`', k['kind'],
        k.get('computes', ''), f'{k["ms_per_step"]:,.2f}'
    ] for k in heaviest[:top]]
    lines += ('', 'The heaviest kernels:', '',
              runs.markdown_table(['kernel', 'kind', 'computes', unit], rows))
  return lines


def main():
  parser = study_step.parser(__doc__)
  parser.add_argument(
      '--steps', type=int, default=3,
      help='Steps the trace holds (`vit_jax.benchmark --trace_steps`).')
  parser.add_argument(
      '--trace_dir', type=pathlib.Path, required=True, help='Sum the trace '
      '`vit_jax.benchmark --trace_dir` wrote there (any model, CPU or GPU).')
  args = parser.parse_args()
  if not (events := trace_events(args.trace_dir)):
    raise SystemExit(
        f'error: {args.trace_dir} holds no trace: write one with '
        f'python -m vit_jax.benchmark --trace_dir={args.trace_dir}.')
  program = args.trace_dir / step_benchmark.TRACED_PROGRAM
  parts = hlo_parts.model_parts(program.read_text()) if program.exists() else {}
  kinds, by_part, heaviest = device_profile(events, args.steps, parts)
  unit = 'ms per step' if kinds else 'thread-ms per step'
  if not kinds:  # a CPU's trace: its threads
    kinds, by_part = thread_profile(events, args.steps, parts)
  if not kinds:
    raise SystemExit(
        f'error: the trace in {args.trace_dir} holds no XLA operations: on a '
        'CPU, trace with XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true.')
  print('\n'.join(tables(kinds, by_part, heaviest, unit, len(by_part))))


if __name__ == '__main__':
  main()

"""What each instruction of a compiled program computes, in the model's
terms: the jax scope that XLA keeps in every operation's metadata (the flax
module's path, and whether the forward or the backward pass), so that a
profile's time can be summed by part of the model (`profile_step`).

A trace names the instructions it ran: on a CPU each event is one; on a GPU
a fusion's kernel has the fusion's name with '.' as '_', and cuBLAS's and
cuDNN's kernels carry theirs in the event's `hlo_op` (when XLA's command
buffers leave it there). A fusion is described by the scope most of its
operations name, among those of the computations it calls.
"""

import collections
import re
from typing import Iterable, NamedTuple

_COMPUTATION = re.compile(r'^(?:ENTRY )?%?(\S+) .*\{$')
_INSTRUCTION = re.compile(r'^\s+(?:ROOT )?%?([^\s=]+) = (.*)$')
_CALLED = re.compile(
    r'\b(?:calls|to_apply|body|condition)=(\{[^}]*\}|%?[\w.\-]+)')
_OPERAND = re.compile(r'%([\w.\-]+)')
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_LAYER = re.compile(r'(?<=_)\d+$')
_UNNAMED_TRANSFORM = re.compile(r'^\w+\(\)$')  # `vmap()` of a function
# Scopes that say where an operation sits in the program, not in the model.
_CONTROL = ('while', 'body', 'cond', 'checkpoint', 'remat')
OUTSIDE = 'outside the model (loss, metrics, batch)'
UNNAMED = 'not named in the program'


class Part(NamedTuple):
  """Where in the model: its module path (each encoder block's as
  `encoderblock_*`, so the layers add up), the pass, and the jax
  operations of the path there (the most frequent first)."""
  path: str
  direction: str  # 'forward', 'backward' or '' (the optimizer, the loss)
  operations: tuple[str, ...] = ()

  @property
  def label(self) -> str:
    return f'{self.path}, {self.direction}' if self.direction else self.path

  @property
  def described(self) -> str:
    """The label, and the operations where known."""
    return (f'{self.label}: {", ".join(self.operations)}' if self.operations
            else self.label)


def part(op_name: str) -> Part:
  """The `Part` (without operations) a jax op name names."""
  scopes = op_name.split('/')[1:-1]  # the program's jit, the operation
  direction = ''
  for i, scope in enumerate(scopes):
    if scope.startswith(('jvp(', 'transpose(jvp(')):
      direction = 'backward' if scope.startswith('transpose') else 'forward'
      scopes = scopes[i + 1:]
      break
  path = [_LAYER.sub('*', s) if s.startswith('encoderblock_') else
          s.removeprefix('jit(').removesuffix(')') for s in scopes
          if s not in _CONTROL and not _UNNAMED_TRANSFORM.match(s)]
  return Part('/'.join(path) or OUTSIDE, direction)


def model_parts(hlo_text: str) -> dict[str, Part]:
  """Each instruction of `hlo_text` (an optimized module's text, as
  `jax.stages.Compiled.as_text` gives it) by its name and by its kernel's,
  mapped to the `Part` of the model it computes. One that names no jax
  operation (a copy XLA added) has its operand's; left out when none has."""
  computations: dict[str, list[tuple[str, str]]] = {}
  lines: list[tuple[str, str]] = []
  for line in hlo_text.splitlines():
    if header := _COMPUTATION.match(line):
      lines = computations.setdefault(header.group(1), [])
    elif instruction := _INSTRUCTION.match(line):
      lines.append(instruction.groups())

  op_names: dict[str, list[str]] = {}  # a computation's, its calls' included

  def named_in(computation: str) -> list[str]:
    if computation not in op_names:
      op_names[computation] = []  # a cycle, were there one, ends here
      op_names[computation] = [
          name for _, text in computations.get(computation, ())
          for name in _names(text, named_in)]
    return op_names[computation]

  parts = {}
  for body in computations.values():
    for name, text in body:
      counted = collections.Counter()
      operations = collections.defaultdict(collections.Counter)
      for op_name in _names(text, named_in):
        where = part(op_name)
        counted[where] += 1
        operations[where][op_name.rsplit('/', 1)[-1]] += 1
      if counted:
        where = counted.most_common(1)[0][0]
        described = where._replace(operations=tuple(
            op for op, _ in operations[where].most_common(3)))
      else:
        # A copy, a transpose or a cast XLA added: the part whose result it
        # moves (an operand defined before it).
        operand = next((o for o in _OPERAND.findall(text) if o in parts),
                       None)
        if operand is None:
          continue
        described = parts[operand]._replace(operations=(f'moves {operand}',))
      parts[name] = parts[name.replace('.', '_').replace('-', '_')] = (
          described)
  return parts


def _names(text: str, named_in) -> list[str]:
  """The jax op names an instruction's `text` has and those of the
  computations it calls."""
  # XLA joins the names of operations it merged with ';'.
  names = [name for joined in _OP_NAME.findall(text)
           for name in joined.split(';')]
  for called in _CALLED.findall(text):
    for computation in called.strip('{}').split(','):
      names += named_in(computation.strip().lstrip('%'))
  return names


def time_by_part(timed: Iterable[tuple[Part | None, float]]
                 ) -> collections.Counter:
  """`timed`'s (part or None, time) summed by the part's label; UNNAMED for
  None, the time of what the program does not name."""
  total = collections.Counter()
  for where, duration in timed:
    total[where.label if where else UNNAMED] += duration
  return total

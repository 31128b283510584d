"""Each instruction of a compiled program as the module and pass it computes."""

import collections
import functools
import re
from typing import NamedTuple

_COMPUTATION = re.compile(r'^(?:ENTRY )?%?(\S+) .*\{$')
_INSTRUCTION = re.compile(r'^\s+(?:ROOT )?%?([^\s=]+) = (.*)$')
_CALLED = re.compile(
    r'\b(?:calls|to_apply|body|condition|branch_computations|'
    r'true_computation|false_computation|called_computations|select|scatter)'
    r'=(\{[^}]*\}|%?[\w.\-]+)')
_OPERAND = re.compile(r'%([\w.\-]+)')
_OP_NAME = re.compile(r'op_name="([^"]*)"')
# The operations that do a fusion's arithmetic (a custom call: cuBLAS's,
# cuDNN's): a fusion that holds one is theirs, however many elementwise
# operations XLA fused around it.
_ARITHMETIC = re.compile(r'\s(?:dot|convolution|custom-call)\(')
# The model's pass: `jvp(VisionTransformer)`, `transpose(jvp(ResNet))`.
_MODEL_PASS = re.compile(r'^(transpose\()?jvp\((\w+)\)(?(1)\))$')
_LAYER = re.compile(r'(?<=_)\d+$')
# Scopes that say how the program runs an operation, not where in the model
# it is: control flow, remat, scan's calls, jax's and our helper functions
# (`jit(_where)`, `vmap()`, `make_train_step.<locals>.gradients`), a
# module's `__call__`. A module's other methods stay: they name its parts
# (`VisionTransformer._classify`).
_CONTROL = ('while', 'body', 'cond', 'closed_call', 'checkpoint', 'remat',
            'rematted_computation')
_HOW = re.compile(r'\(|<locals>|<lambda>|\.(?:__call__|body|call)$')
# Instructions that run other computations, not kernels of their own: a
# trace's event for one (a command buffer's call) holds many parts.
_CONTAINER = re.compile(r'\s(?:call|while|conditional)\(')
OUTSIDE = 'outside the model (loss, metrics, batch)'
UNNAMED = 'not named in the program'


class Part(NamedTuple):
  """A module path (`encoderblock_*` for every block), pass and jax ops."""
  path: str
  # 'forward', 'backward', or '' outside the model's passes: the optimizer,
  # the input's augmentation, the metrics, an evaluation or a teacher.
  direction: str
  operations: tuple[str, ...] = ()

  @property
  def label(self) -> str:
    return f'{self.path}, {self.direction}' if self.direction else self.path

  @property
  def described(self) -> str:
    return (f'{self.label}: {", ".join(self.operations)}'
            if self.operations else self.label)


def part(op_name: str) -> Part:
  """The `Part` (without operations) a jax op name names; OUTSIDE for none."""
  # XLA joins the names of operations it merged with ';': the first names
  # the part.
  scopes = op_name.split(';')[0].split('/')[:-1]
  if not scopes or not scopes[0].startswith('jit('):
    return Part(OUTSIDE, '')
  # XLA may repeat the whole path after an operation's own: the first is it.
  if scopes[0] in scopes[1:]:
    scopes = scopes[:scopes.index(scopes[0], 1)]
  scopes, direction, model = scopes[1:], '', None
  for i, scope in enumerate(scopes):
    model_pass = _MODEL_PASS.match(scope)
    if model_pass and model_pass.group(2) not in _CONTROL:
      direction = 'backward' if model_pass.group(1) else 'forward'
      scopes, model = scopes[i + 1:], model_pass.group(2)
      break
  path = [
      _LAYER.sub('*', s) if s.startswith('encoderblock_') else s for s in scopes
      if s not in _CONTROL and not _HOW.search(s)
  ]
  # A model's own operations (scan's loop) are the model's.
  return Part('/'.join(path) or model or OUTSIDE, direction)


def model_parts(hlo_text: str) -> dict[str, Part]:
  """`hlo_text`'s instructions, by name and kernel name, to their `Part`."""
  computations: dict[str, list[tuple[str, str]]] = {}
  lines: list[tuple[str, str]] = []
  for line in hlo_text.splitlines():
    if header := _COMPUTATION.match(line):
      lines = computations.setdefault(header.group(1), [])
    elif instruction := _INSTRUCTION.match(line):
      lines.append(instruction.groups())

  # A computation's (op name, whether arithmetic), its calls' included (HLO
  # allows no recursion).
  @functools.cache
  def named_in(computation: str) -> list[tuple[str, bool]]:
    return [
        name for _, text in computations.get(computation, ())
        for name in _names(text, named_in)
    ]

  parts = {}
  for body in computations.values():
    for name, text in body:
      if _CONTAINER.search(text):
        continue
      names = _names(text, named_in)
      arithmetic = [name for name, is_arithmetic in names if is_arithmetic]
      operations = collections.defaultdict(collections.Counter)
      for op_name in arithmetic or [op_name for op_name, _ in names]:
        operations[part(op_name)][op_name.split(';')[0].rsplit('/', 1)[-1]] += 1
      if operations:  # the part most of them name
        where = max(operations, key=lambda p: operations[p].total())
        described = where._replace(operations=tuple(
            op for op, _ in operations[where].most_common(3)))
      else:
        # A copy, a transpose or a cast XLA added: the part whose result it
        # moves (an operand defined before it).
        operands = _OPERAND.findall(text.split('), ')[0])
        if (operand := next((o for o in operands if o in parts), None)) is None:
          continue
        described = parts[operand]._replace(operations=(f'moves {operand}',))
      parts[name] = parts[re.sub(r'[.-]', '_', name)] = described
  return parts


def _names(text: str, named_in) -> list[tuple[str, bool]]:
  """(jax op name, whether arithmetic) of an instruction and what it calls."""
  arithmetic = bool(_ARITHMETIC.search(text))
  # Those that do not start at the program's jit (a parameter's, some
  # reducers') name no part.
  names = [(name, arithmetic) for name in _OP_NAME.findall(text)
           if name.startswith('jit(')]
  for called in _CALLED.findall(text):
    for computation in called.strip('{}').split(','):
      names += named_in(computation.strip().lstrip('%'))
  return names

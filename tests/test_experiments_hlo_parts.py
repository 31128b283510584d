"""hlo_parts.py: compiled programs' instructions as parts of the model."""

import gzip
import json
import os

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from experiments.benchmarks import hlo_parts
from experiments.benchmarks import profile_step
from tests import helpers
from tests.test_experiments_gpu_benchmark import _kernel
from tests.test_experiments_gpu_benchmark import _named

Part = hlo_parts.Part

_OP_NAMES_AND_PARTS = [
    ('jit(train_steps)/jvp(VisionTransformer)/Transformer/encoderblock_3/'
     'LayerNorm_0/reduce_sum',
     Part('Transformer/encoderblock_*/LayerNorm_0', 'forward')),
    ('jit(train_steps)/while/body/transpose(jvp(VisionTransformer))/'
     'Transformer/encoderblock_11/MultiHeadDotProductAttention_0/'
     'btd,dhe->bhte/dot_general',
     Part(
         'Transformer/encoderblock_*/MultiHeadDotProductAttention_0/'
         'btd,dhe->bhte', 'backward')),
    ('jit(train_steps)/while/body/optimizer/mul', Part('optimizer', '')),
    # Remat and scan's scopes, a module's method, a helper's jit.
    ('jit(train_steps)/while/body/closed_call/transpose(jvp(ViT))/'
     'Transformer/scan_blocks/encoderblock.body/rematted_computation/'
     'encoderblock/Dropout_0/Dropout.__call__/jit(_bernoulli)/lt',
     Part('Transformer/scan_blocks/encoderblock/Dropout_0', 'backward')),
    # XLA repeats the path after the operation's own.
    ('jit(train_steps)/jvp(ViT)/Transformer/encoderblock_0/Dropout_0/while/'
     'jit(train_steps)/jvp(ViT)/Transformer/mul',
     Part('Transformer/encoderblock_*/Dropout_0', 'forward')),
    # The loss, the metrics and the input's augmentation.
    ('jit(train_steps)/jit(_one_hot)/eq', Part(hlo_parts.OUTSIDE, '')),
    ('jit(train_steps)/jvp(jit(log_softmax))/sub', Part(hlo_parts.OUTSIDE, '')),
    ('jit(train_steps)/add', Part(hlo_parts.OUTSIDE, '')),
    # Names XLA merged: the first; one outside the program's jit: none.
    ('jit(train_steps)/jvp(ViT)/Transformer/encoderblock_0/LayerNorm_0/mul;'
     'jit(train_steps)/jvp(ViT)/Transformer/encoderblock_0/LayerNorm_0/add',
     Part('Transformer/encoderblock_*/LayerNorm_0', 'forward')),
    ("state.params['head']['bias']", Part(hlo_parts.OUTSIDE, '')),
    # A pass of control flow, not of a model.
    ('jit(train_steps)/jvp(checkpoint)/optimizer/mul', Part('optimizer', '')),
    # A model without a pass (an evaluation, a teacher).
    ('jit(eval_step)/Transformer/encoderblock_1/LayerNorm_0/mul',
     Part('Transformer/encoderblock_*/LayerNorm_0', '')),
]


@pytest.mark.parametrize('op_name, expected', _OP_NAMES_AND_PARTS)
def test_a_jax_op_name_names_its_module_and_pass(op_name, expected):
  assert hlo_parts.part(op_name) == expected


class _Block(nn.Module):

  @nn.compact
  def __call__(self, x):
    y = nn.LayerNorm(name='LayerNorm_0')(x)
    y = nn.gelu(nn.Dense(32, name='Dense_0')(y))
    return x + nn.Dense(16, name='Dense_1')(y)


class _Blocks(nn.Module):
  """Two `_Block`s scanned and rematerialized, as `remat_scan` runs them."""

  @nn.compact
  def __call__(self, x):
    return nn.scan(nn.remat(lambda module, x, _: (_Block()(x), None)),
                   variable_axes={'params': 0}, split_rngs={'params': True},
                   length=2)(self, x, None)[0]


def test_a_compiled_steps_instructions_are_mapped_to_its_modules():
  model, x = _Blocks(), jnp.ones((8, 16))
  gradients = jax.jit(jax.grad(lambda p: jnp.mean(model.apply(p, x)**2)))
  parts = hlo_parts.model_parts(
      gradients.lower(model.init(jax.random.key(0), x)).compile().as_text())
  # One part a module and pass, free of how scan and remat run them; scan's
  # own loop is the model's.
  assert {p.label for p in parts.values()} == {hlo_parts.OUTSIDE} | set(
      f'{path}, {direction}' for direction in ('forward', 'backward')
      for path in ('_Block_0/LayerNorm_0', '_Block_0/Dense_0',
                   '_Block_0/Dense_1', '_Block_0', '_Blocks'))
  # A kernel is found by its name too, '.' written '_'.
  dotted = [name for name in parts if '.' in name]
  assert dotted and all(
      parts[name.replace('.', '_').replace('-', '_')] == parts[name]
      for name in dotted)
  layer_norm = [p for p in parts.values() if p.path == '_Block_0/LayerNorm_0']
  assert any('rsqrt' in p.operations for p in layer_norm)


_HLO = """\
HloModule jit_train_steps

%fused_computation.7 (param_0: f32[8,16]) -> f32[8] {
  %param_0 = f32[8,16]{1,0} parameter(0)
  %constant = f32[] constant(0)
  ROOT %reduce.1 = f32[8]{0} reduce(%param_0, %constant), dimensions={1}, \
to_apply=%region_0, metadata={op_name="jit(train_steps)/transpose(jvp(ViT))/\
Transformer/encoderblock_0/LayerNorm_0/reduce_sum"}
}

%region_0 (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add.2 = f32[] add(%a, %b), metadata={op_name="jit(train_steps)/\
transpose(jvp(ViT))/Transformer/encoderblock_0/LayerNorm_0/reduce_sum"}
}

%fused_computation.8 (param_0: f32[8,16], param_1: f32[16,16]) -> f32[8,16] {
  %param_0 = f32[8,16]{1,0} parameter(0)
  %param_1 = f32[16,16]{1,0} parameter(1)
  %dot.5 = f32[8,16]{1,0} dot(%param_0, %param_1), lhs_contracting_dims={1}, \
rhs_contracting_dims={0}, metadata={op_name="jit(train_steps)/jvp(ViT)/\
Transformer/encoderblock_0/MlpBlock_0/Dense_0/dot_general"}
  %add.6 = f32[8,16]{1,0} add(%dot.5, %param_0), metadata={op_name=\
"jit(train_steps)/jvp(ViT)/Transformer/encoderblock_0/add"}
  ROOT %multiply.7 = f32[8,16]{1,0} multiply(%add.6, %add.6), metadata={\
op_name="jit(train_steps)/jvp(ViT)/Transformer/encoderblock_0/mul"}
}

%body.1 (x: f32[8,16]) -> f32[8,16] {
  ROOT %x = f32[8,16]{1,0} parameter(0)
}

ENTRY %main.9 (x: f32[8,16], w: f32[16,16], p: s32[]) -> f32[8] {
  %x = f32[8,16]{1,0} parameter(0)
  %multiply.3 = f32[8,16]{1,0} multiply(%x, %x), metadata={op_name=\
"jit(train_steps)/jvp(ViT)/Transformer/encoderblock_1/MlpBlock_0/mul;\
jit(train_steps)/jvp(ViT)/Transformer/encoderblock_1/MlpBlock_0/mul"}
  %copy.4 = f32[8,16]{0,1} copy(%multiply.3)
  %input_reduce_fusion.7 = f32[8]{0} fusion(%copy.4), kind=kInput, \
calls=%fused_computation.7
  %w = f32[16,16]{1,0} parameter(1)
  %ynn_fusion.10 = f32[8,16]{1,0} fusion(%x, %w), kind=kCustom, \
calls=%fused_computation.8
  %custom-call.11 = f32[8]{0} custom-call(%copy.4), custom_call_target="x", \
called_computations={%fused_computation.7, %fused_computation.7}
  %p = s32[] parameter(2)
  ROOT %while.12 = f32[8,16]{1,0} while(%ynn_fusion.10), \
condition=%body.1, body=%body.1
}
"""


def test_fusions_read_their_computations_and_copies_their_operand():
  parts = hlo_parts.model_parts(_HLO)
  layer_norm = Part('Transformer/encoderblock_*/LayerNorm_0', 'backward',
                    ('reduce_sum',))
  # The second calls its computations in braces.
  assert parts['input_reduce_fusion.7'] == parts['custom-call.11'] == layer_norm
  # A matmul's fusion is its Dense's, however many operations of its block
  # XLA fused around it.
  assert parts['ynn_fusion.10'] == Part(
      'Transformer/encoderblock_*/MlpBlock_0/Dense_0', 'forward',
      ('dot_general',))
  assert 'while.12' not in parts  # runs others' kernels, has none
  mlp = Part('Transformer/encoderblock_*/MlpBlock_0', 'forward', ('mul',))
  assert parts['multiply.3'] == mlp  # two merged names, one part
  assert parts['copy_4'] == mlp._replace(operations=('moves multiply.3',))
  assert 'x' not in parts  # names nothing
  _, times = profile_step._per_step([('copy', parts['copy.4'], 2e3),
                                     ('other', None, 1e3),
                                     ('other', parts['multiply.3'], 3e3)], (),
                                    [{'ts': 0, 'dur': 6e3}], 1, 'sum', 'wall')
  assert list(times.items()) == [(mlp.label, 5.0), (hlo_parts.UNNAMED, 1.0)]
  assert layer_norm.described == (
      'Transformer/encoderblock_*/LayerNorm_0, backward: reduce_sum')


@pytest.mark.slow  # 55 s: the study's step and a CNN's traced
def test_real_cpu_traces_are_summed_by_part_of_the_model(
    tmp_path, monkeypatch, capsys):

  def summed(model: str) -> str:
    """`profile_step.py`'s tables of `model`'s traced step, one device."""
    trace_dir = tmp_path / model
    helpers.run_module(
        'vit_jax.benchmark', f'--model={model}', '--batch_size=8', '--steps=1',
        '--cpu_devices=1', f'--trace_dir={trace_dir}', '--trace_steps=1',
        status=0,
        env={**os.environ, 'XLA_FLAGS': '--xla_cpu_enable_xprof_traceme=true'})
    helpers.script_main(monkeypatch, profile_step.main, 'profile_step.py',
                        f'--trace_dir={trace_dir}', '--steps=1')
    return capsys.readouterr().out

  table = summed('ViT-Tiny-CIFAR_4').split(
      '| part of the model | thread-ms per step |')[1]
  rows = {
      cells[0]: float(cells[1].replace(',', ''))
      for cells in ([c.strip() for c in line.strip('|').split('|')]
                    for line in table.strip().splitlines()[1:])
  }
  for module in ('LayerNorm_0', 'MlpBlock_0/Dense_0'):
    for direction in 'forward', 'backward':
      assert rows[f'Transformer/encoderblock_*/{module}, {direction}'] > 0
  assert rows['optimizer'] > 0
  # The runtime's own events aside, the program names where most of the time
  # goes (the unnamed share is timed and grows beside other work; were the
  # names lost, it would be all of it).
  assert rows.get(hlo_parts.UNNAMED, 0) < 0.5 * sum(rows.values())

  printed = summed('SimpleCNN')  # any model's trace
  assert '| part of the model | thread-ms per step |' in printed
  for layer in 'conv_1', 'conv_3', 'bn_0':  # layers of a CNN, any model's
    assert f'| {layer}, forward |' in printed
    assert f'| {layer}, backward |' in printed


def test_a_trace_dir_without_a_trace_or_xlas_operations_is_one_line(
    tmp_path, monkeypatch):
  with pytest.raises(SystemExit) as stopped:
    helpers.script_main(monkeypatch, profile_step.main, 'profile_step.py',
                        f'--trace_dir={tmp_path}')
  assert str(stopped.value) == (
      f'error: {tmp_path} holds no trace: write one with python -m '
      f'vit_jax.benchmark --trace_dir={tmp_path}.')
  # A CPU trace taken without XLA's per-operation events holds only the
  # runtime's: the line says which flag records them.
  trace = tmp_path / 'plugins' / 'profile' / 'perfetto_trace.json.gz'
  trace.parent.mkdir(parents=True)
  events = [
      _named('thread', 1, 'python', tid=2),
      _kernel('PjitFunction(train_steps)', 0, 5, tid=2, pid=1)
  ]
  with gzip.open(trace, 'wt') as f:
    json.dump({'traceEvents': events}, f)
  with pytest.raises(SystemExit) as stopped:
    profile_step.main()
  assert str(stopped.value) == (
      f'error: the trace in {tmp_path} holds no XLA operations: on a CPU, '
      'trace with XLA_FLAGS=--xla_cpu_enable_xprof_traceme=true.')

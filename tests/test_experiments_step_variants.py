"""experiments/benchmarks/step_variants.py: variants, each in a process."""

import json
import subprocess
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from experiments.benchmarks import step_variants
from tests import helpers
from vit_jax import models
from vit_jax.models.layers import attention as attention_layer
from vit_jax.models.layers import patch_embedding

# A small ViT: the variants change its layers, whatever their size.
_ONE_LAYER = dict(num_layers=1, hidden_size=32, num_heads=2, mlp_dim=64)


def _main(monkeypatch, *flags):
  helpers.script_main(monkeypatch, step_variants.main, 'step_variants.py',
                      *flags)


def test_a_variant_xla_refuses_is_a_row_and_the_others_run(
    monkeypatch, capsys, tmp_path):
  # ViT-B/16's step at --smoke's size; `cublaslt`'s flag made one that XLA
  # lacks, so its process dies starting jax.
  profiled = step_variants.PROFILED  # its flag left out: a CPU's XLA
  monkeypatch.setattr(step_variants, 'GPU_FLAGS',
                      {profiled: '', 'cublaslt': '--xla_no_such_flag=true'})
  output = tmp_path / 'runs.json'
  _main(monkeypatch, '--gpu', '--smoke', '--rounds=1', '--steps=1',
        f'--variants={profiled},cublaslt', f'--output={output}')
  printed = capsys.readouterr().out
  assert 'round 1: cublaslt: failed: exit ' in printed
  assert '| cublaslt | 0 |  |  |' in printed
  baseline, bad = json.loads(output.read_text())
  assert (baseline['variant'], baseline['round']) == (profiled, 1)
  assert baseline['train_images_per_second'] > 0
  assert baseline['compile_seconds'] > 0
  assert bad['variant'] == 'cublaslt' and 'xla_no_such_flag' in bad['failed']
  # The profiled variant traced its step (a CPU's trace: no GPU kernels).
  assert set(baseline['profile']) == {
      'ms_per_step_by_kind', 'ms_per_step_by_model_part', 'heaviest_kernels'
  }


def test_the_baseline_opens_every_round_and_the_seconds_stop_new_runs(
    monkeypatch, capsys):
  ran = []

  def run(variant, unused_args):
    ran.append(variant)
    return dict(variant=variant, train_images_per_second=1.0,
                compile_seconds=1.0)

  monkeypatch.setattr(step_variants, '_run', run)
  _main(monkeypatch, '--gpu', '--rounds=2', '--variants=default,cublaslt,'
        'patch_matmul')
  assert ran == [
      'default', 'cublaslt', 'patch_matmul', 'default', 'patch_matmul',
      'cublaslt'
  ]
  assert '| patch_matmul | 2 | 1.0 | 1.0 |' in capsys.readouterr().out
  _main(monkeypatch, '--gpu', '--seconds=-1')
  printed = capsys.readouterr().out
  assert 'round' not in printed and '| default | 0 |  |  |' in printed
  with pytest.raises(SystemExit):
    _main(monkeypatch, '--gpu', '--variants=default,cudnn_layernorm')
  error = capsys.readouterr().err
  assert 'unknown variants cudnn_layernorm; use some of default, ' in error


def test_the_patch_matmul_is_the_conv_with_the_same_parameters(monkeypatch):
  # Restored after the test: use_patch_matmul replaces it.
  monkeypatch.setattr(patch_embedding, 'embed_patches',
                      patch_embedding.embed_patches)
  # The parameters are float32 whatever the computation's dtype.
  model = {
      dtype: models.create_model('ViT-Ti_16', num_classes=10, dtype=dtype,
                                 **_ONE_LAYER)
      for dtype in (jnp.float32, jnp.bfloat16)
  }
  images = helpers.normal((2, 32, 32, 3))
  conv = model[jnp.float32].init(jax.random.key(0), images, train=False)
  # Nothing zero (the initial head and biases are), for the logits to show.
  random = {'params': helpers.randomized(conv['params'])}

  def program(variables):
    return str(
        jax.make_jaxpr(lambda v: model[jnp.float32].apply(
            v, images, train=False))(variables))

  def logits():
    return {d: m.apply(random, images, train=False) for d, m in model.items()}

  assert 'conv_general_dilated' in program(conv)
  expected = logits()
  step_variants.use_patch_matmul()
  matmul = model[jnp.float32].init(jax.random.key(0), images, train=False)
  assert 'conv_general_dilated' not in program(matmul)
  jax.tree.map(np.testing.assert_array_equal, matmul, conv)  # the same tree
  for (dtype, ours), tolerance in zip(logits().items(), (1e-5, 2e-2)):
    assert ours.dtype == expected[dtype].dtype
    np.testing.assert_allclose(np.asarray(ours, np.float32),
                               np.asarray(expected[dtype], np.float32),
                               rtol=tolerance, atol=tolerance)


def test_a_run_that_outlasts_its_time_keeps_what_it_timed(monkeypatch):
  # The profiled variant prints its timing before it traces: a run cut
  # there keeps it; one cut before has nothing.
  timed = dict(variant=step_variants.PROFILED, batch_size=256,
               train_images_per_second=3000.0, compile_seconds=15.0)

  printed = []  # by the run, when the time was up

  def cut(command, **kwargs):
    raise subprocess.TimeoutExpired(command, kwargs['timeout'],
                                    output=b''.join(printed) or None)

  monkeypatch.setattr(step_variants.study_step.subprocess, 'run', cut)
  args = types.SimpleNamespace(steps=10, gpu=True, smoke=False,
                               run_timeout=120.0)
  run = step_variants._run(step_variants.PROFILED, args)
  assert run == {'variant': step_variants.PROFILED, 'failed': 'over 120 s'}
  printed += (b'jax starting\n',
              f'{step_variants.RESULT}{json.dumps(timed)}\n'.encode())
  run = step_variants._run(step_variants.PROFILED, args)
  assert run == {**timed, 'profile': {'failed': 'over 120 s'}}


@pytest.mark.parametrize('attention', ['einsum', 'dot_product_attention'])
def test_the_fused_qkv_is_the_three_projections(monkeypatch, attention):
  # Restored after the test: use_fused_qkv replaces it.
  monkeypatch.setattr(attention_layer, 'project_qkv',
                      attention_layer.project_qkv)
  model = models.create_model('ViT-Ti_16', num_classes=10, attention=attention,
                              **_ONE_LAYER)
  images = helpers.normal((2, 32, 32, 3))
  # Nothing zero: a bias or an output out of place would show.
  variables = {'params': helpers.random_params(model, images, train=False)}

  def run():
    return model.apply(variables, images, train=False), str(
        jax.make_jaxpr(lambda v: model.apply(v, images, train=False))(
            variables)).count('dot_general')

  separate, separate_matmuls = run()
  step_variants.use_fused_qkv()
  fused, fused_matmuls = run()
  assert fused_matmuls == separate_matmuls - 2  # one where there were three
  np.testing.assert_allclose(fused, separate, rtol=1e-5, atol=1e-4)

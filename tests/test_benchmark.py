"""The benchmark tool: FLOP counting and a short run."""

import json
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax import benchmark
from vit_jax.models import create_model


def test_matmul_flops_of_a_dense_and_a_conv():
  dense = jax.make_jaxpr(lambda x, w: x @ w)(jnp.ones((8, 16)),
                                              jnp.ones((16, 4)))
  assert benchmark.matmul_flops(dense.jaxpr) == 2 * 8 * 16 * 4

  conv = nn.Conv(6, (3, 3), strides=(2, 2), padding='VALID')
  x = jnp.ones((2, 9, 9, 5))
  variables = conv.init(jax.random.key(0), x)
  jaxpr = jax.make_jaxpr(conv.apply)(variables, x)
  assert benchmark.matmul_flops(jaxpr.jaxpr) == 2 * (2 * 4 * 4 * 6) * (3 * 3 * 5)


def test_vit_tiny_forward_flops_match_the_analytic_count():
  model = create_model('ViT-Tiny-CIFAR_4', 10)
  variables = jax.eval_shape(lambda: model.init(
      jax.random.key(0), jnp.zeros((1, 32, 32, 3)), train=False))
  tokens, hidden, mlp = 65, 128, 512
  per_layer = (2 * tokens * hidden * 4 * hidden  # q, k, v, out projections
               + 2 * 2 * tokens * tokens * hidden  # logits and weighted sum
               + 2 * 2 * tokens * hidden * mlp)  # MLP
  expected = (2 * 64 * 48 * hidden  # patch embedding
              + 6 * per_layer + 2 * hidden * 10)  # blocks, head
  assert benchmark.forward_flops_per_image(model, variables, 32) == expected


def test_command_prints_a_table_and_a_json_line():
  out = subprocess.run(
      [sys.executable, '-m', 'vit_jax.benchmark', '--model=SimpleCNN',
       '--batch_size=8', '--steps=1', '--cpu_devices=2'],
      capture_output=True, text=True, check=True)
  lines = out.stdout.strip().splitlines()
  result = json.loads(lines[-1])
  assert result['devices'] == '2 x cpu'
  assert result['train_images_per_second'] > 0
  assert 0 < result['train_utilisation'] < 1.5
  assert abs(result['xla_train_gflop_per_image'] /
             result['train_gflop_per_image'] - 1) < 0.5
  assert any(line.startswith('train_ms_per_step') for line in lines)

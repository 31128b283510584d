"""FLOPs counted from a model's program; the known peaks."""

import flax.linen as nn
import jax
import jax.numpy as jnp

from vit_jax.formats import params as params_lib
from vit_jax.models import create_model
from vit_jax.models import masked_autoencoder
from vit_jax.training import flops


def test_matmul_flops_of_a_dense_and_a_conv():
  dense = jax.make_jaxpr(lambda x, w: x @ w)(jnp.ones((8, 16)), jnp.ones(
      (16, 4)))
  assert flops.matmul_flops(dense.jaxpr) == 2 * 8 * 16 * 4

  conv = nn.Conv(6, (3, 3), strides=(2, 2), padding='VALID')
  x = jnp.ones((2, 9, 9, 5))
  jaxpr = jax.make_jaxpr(conv.apply)(conv.init(jax.random.key(0), x), x)
  assert flops.matmul_flops(jaxpr.jaxpr) == 2 * (2 * 4 * 4 * 6) * (3 * 3 * 5)


def test_vit_tiny_forward_flops_match_the_analytic_count():
  model = create_model('ViT-Tiny-CIFAR_4', 10)
  tokens, hidden, mlp = 65, 128, 512
  per_layer = (
      2 * tokens * hidden * 4 * hidden  # q, k, v, out projections
      + 2 * 2 * tokens * tokens * hidden  # logits and weighted sum
      + 2 * 2 * tokens * hidden * mlp)  # MLP
  expected = (
      2 * 64 * 48 * hidden  # patch embedding
      + 6 * per_layer + 2 * hidden * 10)  # blocks, head
  # Scanned too: the one block traced counts once per layer.
  for traced in model, model.clone(scan=True, remat='full'):
    variables = {'params': params_lib.param_shapes(traced, 32)}
    assert flops.forward_flops_per_image(traced, variables, 32) == expected
  # As training runs it, a masked autoencoder encodes a quarter of the
  # patches (16 of 64, and the class token), and its decoder embeds those.
  mae = masked_autoencoder.MaskedAutoencoder(model, 0.75, 1, 32)
  variables = {'params': params_lib.param_shapes(mae, 32)}
  evaluated, trained = (flops.forward_flops_per_image(mae, variables, 32,
                                                      train=train)
                        for train in (False, True))
  encoder = lambda tokens: 6 * (2 * tokens * hidden * (4 * hidden + 2 * mlp) + 4
                                * tokens * tokens * hidden)
  assert evaluated - trained == encoder(65) - encoder(17) + 2 * 48 * hidden * 32
  fused = masked_autoencoder.MaskedAutoencoder(model.clone(attention='cudnn'),
                                               0.75, 1, 32)  # counted as einsum
  assert flops.forward_flops_per_image(fused, variables, 32, True) == trained


def test_peaks_are_known_for_accelerators_and_not_for_cpus():
  assert flops.peak_flops('NVIDIA H100 80GB HBM3', 'bfloat16') == 989e12
  assert flops.peak_flops('NVIDIA H100 PCIe', 'float32') == 378e12
  assert flops.peak_flops('TPU v5 lite', 'bfloat16') == 197e12
  assert flops.peak_flops('cpu', 'float32') is None

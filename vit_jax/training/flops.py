"""FLOPs of a model, counted from its program, and the accelerators' peaks."""

import math
import re
from typing import Any

import jax
import jax.extend
import jax.numpy as jnp

# Dense peak FLOP/s per JAX device from the vendors' datasheets, for matmuls
# in bfloat16 and in float32 as JAX runs them by default (TF32 on NVIDIA
# tensor cores, bfloat16 passes on TPUs). Keyed by words of
# `device.device_kind` ('L4' does not match 'L40S'); the first match wins.
PEAK_FLOPS = (
    # kind substring, bfloat16, float32
    ('H100 PCIe', 756e12, 378e12),
    ('H100', 989e12, 494e12),  # SXM
    ('H200', 989e12, 494e12),
    ('A100', 312e12, 156e12),
    ('L4', 121e12, 60e12),
    ('TPU v3', 61.5e12, 61.5e12),  # a device is one of a chip's two cores
    ('TPU v4', 275e12, 275e12),
    ('TPU v5 lite', 197e12, 197e12),
    ('TPU v5', 459e12, 459e12),  # v5p
    ('TPU v6 lite', 918e12, 918e12),
)


def peak_flops(device_kind: str, dtype: str) -> float | None:
  """One device's datasheet peak in `dtype`; None when unknown (CPUs)."""
  for kind, bfloat16, float32 in PEAK_FLOPS:
    if re.search(rf'(^|\W){re.escape(kind)}($|\W)', device_kind):
      return bfloat16 if dtype == 'bfloat16' else float32
  return None


def matmul_flops(jaxpr) -> int:
  """2*M*N*K summed over the matmuls and convolutions of `jaxpr`."""
  total = 0
  for eqn in jaxpr.eqns:
    # Per output, the products summed into it: a matmul's contracted lhs
    # dimensions, a convolution kernel's (in, *spatial) ones.
    summed = None
    if eqn.primitive.name == 'dot_general':
      (lhs_contract, _), _ = eqn.params['dimension_numbers']
      summed = [eqn.invars[0].aval.shape[d] for d in lhs_contract]
    elif eqn.primitive.name == 'conv_general_dilated':
      spec = eqn.params['dimension_numbers'].rhs_spec  # (out, in, *spatial)
      summed = [eqn.invars[1].aval.shape[d] for d in spec[1:]]
    if summed is not None:
      total += 2 * math.prod(eqn.outvars[0].aval.shape) * math.prod(summed)
    # A scan's body runs `length` times (a scanned ViT's blocks).
    times = eqn.params['length'] if eqn.primitive.name == 'scan' else 1
    for param in eqn.params.values():
      for sub in param if isinstance(param, (list, tuple)) else [param]:
        sub = getattr(sub, 'jaxpr', sub)  # a ClosedJaxpr's
        if isinstance(sub, jax.extend.core.Jaxpr):
          total += times * matmul_flops(sub)
  return total


def forward_flops_per_image(model, variables, image_size: int,
                            train: bool = False) -> int:
  """Matmul FLOPs of one image's forward pass; `variables` may be shapes."""
  # `train`: as training runs it, as an MAE encoding a quarter of the patches.
  # A fused attention kernel hides its matmuls from the count: the ViT's,
  # or a wrapper's (MAE, guidance), is counted as einsum.
  vit = getattr(model, 'vit', model)
  if getattr(vit, 'attention', 'einsum') != 'einsum':
    einsum = vit.clone(attention='einsum')
    model = einsum if vit is model else model.clone(vit=einsum)
  images = jax.ShapeDtypeStruct((1, image_size, image_size, 3), jnp.float32)
  jaxpr = jax.make_jaxpr(lambda v, x: model.apply(
      v, x, train=train, rngs={'dropout': jax.random.key(0)}, mutable=
      ['batch_stats']))(variables, images)
  return matmul_flops(jaxpr.jaxpr)


def train_flops_per_image(model, variables, image_size: int,
                          teachers: list[tuple[Any, Any]]) -> int:
  """Matmul FLOPs of one image's train step: 3 forward passes, and teachers'."""
  student = forward_flops_per_image(model, variables, image_size, train=True)
  taught = sum(forward_flops_per_image(m, v, image_size) for m, v in teachers)
  return 3 * student + taught

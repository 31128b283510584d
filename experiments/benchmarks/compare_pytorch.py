r"""Our ViT-Tiny train step against timm's VisionTransformer, on this machine.

  python experiments/benchmarks/compare_pytorch.py \
      --torch_python=../torch_venv/bin/python --rounds=3 --steps=10

Our contenders (`python -m vit_jax.benchmark`, on 1 and 4 host devices) run
under this Python; the PyTorch ones run this file as `--worker` under
`--torch_python`, a venv with torch and timm that the project does not depend
on. timm's model is configured as ViT-Tiny-CIFAR_4 (`timm_vit` asserts its
parameters, norms and dropouts); each round runs every contender in a fresh
process, alternating order: batch 128, float32, AdamW, eager and
torch.compile. Writes the runs and medians to --output and prints a table.
"""

import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import time
from typing import NamedTuple

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
# Under --torch_python too, which has torch, not the project, installed.
sys.path.insert(0, str(REPO))

# pylint: disable-next=g-import-not-at-top,wrong-import-position
from experiments.benchmarks import study_step

BATCH = 128
TORCH_MODES = ('eager', 'compile')
# Our step of ViT-Tiny-CIFAR_4 (main_vs_step.py's too).
BENCHMARK = [
    sys.executable, '-m', 'vit_jax.benchmark', '--model=ViT-Tiny-CIFAR_4',
    f'--batch_size={BATCH}', '--image_size=32'
]


class Architecture(NamedTuple):
  """A ViT as timm's VisionTransformer is configured, and its parameter count."""
  image: int
  patch: int
  hidden: int
  layers: int
  heads: int
  mlp: int
  classes: int
  dropout: float
  parameters: int


# ViT-Tiny-CIFAR_4, its parameters as tests/test_models_registry.py counts.
VIT_TINY_CIFAR = Architecture(image=32, patch=4, hidden=128, layers=6, heads=4,
                              mlp=512, classes=10, dropout=0.1,
                              parameters=1_205_898)


def timm_vit(architecture: Architecture = VIT_TINY_CIFAR):
  """timm's VisionTransformer as our ViT of `architecture` (train mode)."""
  import functools  # pylint: disable=g-import-not-at-top
  import timm  # pylint: disable=g-import-not-at-top
  from timm.models import vision_transformer  # pylint: disable=g-import-not-at-top
  from torch import nn  # pylint: disable=g-import-not-at-top

  a = architecture
  model = vision_transformer.VisionTransformer(
      img_size=a.image,
      patch_size=a.patch,
      num_classes=a.classes,
      global_pool='token',
      class_token=True,
      embed_dim=a.hidden,
      depth=a.layers,
      num_heads=a.heads,
      mlp_ratio=a.mlp / a.hidden,
      qkv_bias=True,
      norm_layer=functools.partial(nn.LayerNorm, eps=1e-6),
      act_layer=functools.partial(nn.GELU, approximate='tanh'),
      # Dropout where ours has it: after the position embedding (pos_drop),
      # the attention's projection and the MLP's layers (proj_drop, drop1,
      # drop2); none on attention weights, the head (drop_rate) or paths.
      pos_drop_rate=a.dropout,
      proj_drop_rate=a.dropout,
      attn_drop_rate=0.0,
      drop_rate=0.0,
      drop_path_rate=0.0,
      weight_init='jax')
  parameters = sum(p.numel() for p in model.parameters())
  assert parameters == a.parameters, (parameters, a.parameters)
  layer_norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
  assert len(layer_norms) == 2 * a.layers + 1, len(layer_norms)
  assert all(m.eps == 1e-6 for m in layer_norms)
  dropouts = [m.p for m in model.modules() if isinstance(m, nn.Dropout)]
  # pos_drop + per block (attn_drop, proj_drop, drop1, drop2) + head_drop.
  assert sorted(dropouts) == sorted([a.dropout] +
                                    [0.0, a.dropout, a.dropout, a.dropout] *
                                    a.layers + [0.0]), dropouts
  return model, timm.__version__


# What torch.compile compiles of a step: nothing, the whole step (forward,
# backward and AdamW's update in one graph), or the model alone beside
# AdamW's fused CUDA kernel (the usual recipe of PyTorch's own examples).
COMPILED = ('nothing', 'step', 'model')


def train_step(model, architecture: Architecture, batch: int, compiled: str,
               device: str = 'cpu', bfloat16: bool = False):
  """A function that runs one AdamW step of `model` on a fixed random batch,
  torch.compile applied to what `compiled` (of COMPILED) names;
  checks first that the eval-mode features and logits are finite."""
  import torch  # pylint: disable=g-import-not-at-top
  from torch import nn  # pylint: disable=g-import-not-at-top

  if compiled not in COMPILED:
    raise ValueError(f'compiled={compiled!r}; use one of {COMPILED}.')
  model.to(device)
  fused = compiled == 'model' and device == 'cuda'
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01,
                                fused=fused or None)
  loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
  size = architecture.image
  images = torch.randn(batch, 3, size, size, device=device)
  labels = torch.randint(0, architecture.classes, (batch,), device=device)

  model.eval()  # The head starts at zero (as ours), so check the features too.
  with torch.no_grad():
    features = model.forward_features(images)
    logits = model.forward_head(features)
  assert logits.shape == (batch, architecture.classes), logits.shape
  assert torch.isfinite(features).all() and torch.isfinite(logits).all()

  def step():
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device, dtype=torch.bfloat16, enabled=bfloat16):
      loss = loss_fn(model(images), labels)
    loss.backward()
    optimizer.step()
    return loss

  model.train()
  if compiled == 'model':
    model.compile()  # in place: the optimizer keeps the same parameters
  return torch.compile(step) if compiled == 'step' else step


def run_steps(step, count: int, device: str = 'cpu') -> list[float]:
  """Seconds of each of `count` steps; checks that the last loss is finite."""
  import torch  # pylint: disable=g-import-not-at-top
  times = []
  for _ in range(count):
    start = time.perf_counter()
    loss = step()
    if device == 'cuda':
      torch.cuda.synchronize()
    times.append(time.perf_counter() - start)
  assert torch.isfinite(loss), loss
  return times


def torch_worker(compiled: str, steps: int) -> dict:
  import torch  # pylint: disable=g-import-not-at-top

  torch.manual_seed(0)
  model, timm_version = timm_vit()
  step = train_step(model, VIT_TINY_CIFAR, BATCH, compiled)
  warmup_seconds = sum(run_steps(step, 3))
  seconds = statistics.median(run_steps(step, steps))
  return {
      'images_per_second': BATCH / seconds, 'ms_per_step': 1000 * seconds,
      'warmup_seconds': warmup_seconds, 'threads': torch.get_num_threads(),
      'version': torch.__version__, 'timm_version': timm_version,
      'parameters': VIT_TINY_CIFAR.parameters,
  }


def run(command: list[str]) -> dict:
  out = subprocess.run(command, capture_output=True, text=True, check=False,
                       cwd=REPO)
  if out.returncode:
    raise RuntimeError(f'{" ".join(command)} failed:\n{out.stderr[-3000:]}')
  return json.loads(out.stdout.strip().splitlines()[-1])


def contenders(steps: int, torch_python: str,
               torch_modes: list[str]) -> dict[str, list[str]]:
  ours = BENCHMARK + [f'--steps={steps}', '--noaugment']
  worker = [
      torch_python,
      str(pathlib.Path(__file__).resolve()), f'--steps={steps}', '--worker'
  ]
  names = {
      'eager': 'PyTorch (timm) eager', 'compile': 'PyTorch (timm) torch.compile'
  }
  return {
      'vit_jax, 1 CPU device': ours + ['--cpu_devices=1'],
      'vit_jax, 4 host devices (default)': ours + ['--cpu_devices=4'],
      **{names[mode]: worker + [mode] for mode in torch_modes},
  }


def main():
  parser = study_step.parser(__doc__, rounds=3, steps=10)
  parser.add_argument(
      '--torch_python', default=sys.executable,
      help='Python with torch and timm that runs the PyTorch '
      'workers (default: this one).')
  parser.add_argument('--torch_modes', default=','.join(TORCH_MODES),
                      help='Comma-separated PyTorch modes to run.')
  parser.add_argument('--output', type=pathlib.Path,
                      default=HERE / 'pytorch_comparison.json')
  parser.add_argument('--worker', choices=TORCH_MODES)
  args = parser.parse_args()
  if args.worker:
    print(
        json.dumps(
            torch_worker('step' if args.worker == 'compile' else 'nothing',
                         args.steps)))
    return

  torch_modes = [m for m in args.torch_modes.split(',') if m]
  if not torch_modes or set(torch_modes) - set(TORCH_MODES):
    parser.error(f'--torch_modes: a subset of {",".join(TORCH_MODES)}')
  runs = contenders(args.steps, args.torch_python, torch_modes)
  results = {name: [] for name in runs}
  for round_number, name in study_step.rounds(runs, args.rounds):
    result = run(runs[name])
    rate = result.get('images_per_second',
                      result.get('train_images_per_second'))
    results[name].append({**result, 'images_per_second': rate})
    print(f'round {round_number}: {name}: {rate:.1f} img/s', flush=True)

  medians = {
      name: statistics.median(r['images_per_second'] for r in rs)
      for name, rs in results.items()
  }
  best_torch = max(v for k, v in medians.items() if k.startswith('PyTorch'))
  summary = {
      'date': datetime.date.today().isoformat(),
      'machine': f'{platform.processor() or platform.machine()}, '
                 f'{len(os.sched_getaffinity(0))} cores', 'rounds': args.rounds,
      'steps': args.steps, 'pythons': {
          'vit_jax': sys.executable, 'pytorch': args.torch_python
      }, 'pytorch_model': 'timm VisionTransformer (ViT-Tiny-CIFAR_4 config)',
      'median_images_per_second': medians, 'ours_over_best_pytorch': {
          k: v / best_torch for k, v in medians.items()
          if k.startswith('vit_jax')
      }, 'runs': results,
  }
  args.output.write_text(json.dumps(summary, indent=2))
  print()
  study_step.print_table(
      ('step (ViT-Tiny-CIFAR_4, batch 128, f32, AdamW)', 'median img/s',
       'ours / best PyTorch'),
      ((name, f'{rate:.1f}',
        f'{rate / best_torch:.2f}' if name.startswith('vit_jax') else '')
       for name, rate in medians.items()))


if __name__ == '__main__':
  main()

r"""Our ViT-Tiny train step against the same step in PyTorch, on this machine.

  pip install torch==2.13.0    # optional, only for this script
  python experiments/benchmarks/compare_pytorch.py --rounds=3 --steps=10

Each round runs, in a fresh process each and in alternating order, the
vit_jax train step (`python -m vit_jax.benchmark`, on 1 and on the default
host devices) and a PyTorch step of the same model (ViT-Tiny-CIFAR_4:
1,205,898 parameters, pre-LayerNorm, tanh GELU, dropout 0.1), batch 128 of
32x32 images, float32, AdamW, label smoothing 0.1, in eager mode and under
torch.compile. Neither side augments. Writes `pytorch_comparison.json` and
prints a markdown table of the median images/s over rounds.
"""

import argparse
import datetime
import json
import pathlib
import platform
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
BATCH, IMAGE, PATCH, HIDDEN, LAYERS, HEADS, MLP, CLASSES = (128, 32, 4, 128, 6,
                                                            4, 512, 10)


def torch_worker(compiled: bool, steps: int) -> dict:
  import torch  # pylint: disable=g-import-not-at-top
  from torch import nn  # pylint: disable=g-import-not-at-top

  class Block(nn.Module):

    def __init__(self):
      super().__init__()
      self.norm1 = nn.LayerNorm(HIDDEN, eps=1e-6)
      self.attention = nn.MultiheadAttention(HIDDEN, HEADS, batch_first=True)
      self.norm2 = nn.LayerNorm(HIDDEN, eps=1e-6)
      self.mlp = nn.Sequential(
          nn.Linear(HIDDEN, MLP), nn.GELU(approximate='tanh'), nn.Dropout(0.1),
          nn.Linear(MLP, HIDDEN), nn.Dropout(0.1))
      self.dropout = nn.Dropout(0.1)

    def forward(self, x):
      y = self.norm1(x)
      x = x + self.dropout(self.attention(y, y, y, need_weights=False)[0])
      return x + self.mlp(self.norm2(x))

  class ViT(nn.Module):

    def __init__(self):
      super().__init__()
      tokens = (IMAGE // PATCH)**2 + 1
      self.embedding = nn.Conv2d(3, HIDDEN, PATCH, stride=PATCH)
      self.cls = nn.Parameter(torch.zeros(1, 1, HIDDEN))
      self.pos_embedding = nn.Parameter(torch.randn(1, tokens, HIDDEN) * 0.02)
      self.dropout = nn.Dropout(0.1)
      self.blocks = nn.Sequential(*[Block() for _ in range(LAYERS)])
      self.norm = nn.LayerNorm(HIDDEN, eps=1e-6)
      self.head = nn.Linear(HIDDEN, CLASSES)

    def forward(self, images):
      x = self.embedding(images).flatten(2).transpose(1, 2)
      x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
      x = self.blocks(self.dropout(x + self.pos_embedding))
      return self.head(self.norm(x)[:, 0])

  torch.manual_seed(0)
  model = ViT()
  parameters = sum(p.numel() for p in model.parameters())
  assert parameters == 1_205_898, parameters
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
  loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
  images = torch.randn(BATCH, 3, IMAGE, IMAGE)
  labels = torch.randint(0, CLASSES, (BATCH,))

  def step():
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(images), labels)
    loss.backward()
    optimizer.step()
    return loss

  if compiled:
    step = torch.compile(step)
  model.train()
  start = time.perf_counter()
  for _ in range(3):
    step()
  warmup_seconds = time.perf_counter() - start
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    step()
    times.append(time.perf_counter() - start)
  seconds = statistics.median(times)
  return {
      'images_per_second': BATCH / seconds,
      'ms_per_step': 1000 * seconds,
      'warmup_seconds': warmup_seconds,
      'threads': torch.get_num_threads(),
      'version': torch.__version__,
  }


def run(command: list[str]) -> dict:
  out = subprocess.run(command, capture_output=True, text=True, check=False)
  if out.returncode:
    raise RuntimeError(f'{" ".join(command)} failed:\n{out.stderr[-3000:]}')
  return json.loads(out.stdout.strip().splitlines()[-1])


def contenders(steps: int) -> dict[str, list[str]]:
  ours = [sys.executable, '-m', 'vit_jax.benchmark', '--model=ViT-Tiny-CIFAR_4',
          f'--batch_size={BATCH}', f'--image_size={IMAGE}', f'--steps={steps}',
          '--noaugment']
  this = [sys.executable, __file__, f'--steps={steps}', '--worker']
  return {
      'vit_jax, 1 CPU device': ours + ['--cpu_devices=1'],
      'vit_jax, 4 host devices (default)': ours + ['--cpu_devices=4'],
      'PyTorch eager': this + ['eager'],
      'PyTorch torch.compile': this + ['compile'],
  }


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('--rounds', type=int, default=3)
  parser.add_argument('--steps', type=int, default=10)
  parser.add_argument('--worker', choices=['eager', 'compile'])
  args = parser.parse_args()
  if args.worker:
    print(json.dumps(torch_worker(args.worker == 'compile', args.steps)))
    return

  runs = contenders(args.steps)
  results = {name: [] for name in runs}
  for round_index in range(args.rounds):
    order = list(runs) if round_index % 2 == 0 else list(reversed(runs))
    for name in order:
      result = run(runs[name])
      rate = result.get('images_per_second',
                        result.get('train_images_per_second'))
      results[name].append({**result, 'images_per_second': rate})
      print(f'round {round_index + 1}: {name}: {rate:.1f} img/s', flush=True)

  medians = {name: statistics.median(r['images_per_second'] for r in rs)
             for name, rs in results.items()}
  best_torch = max(v for k, v in medians.items() if k.startswith('PyTorch'))
  summary = {
      'date': datetime.date.today().isoformat(),
      'machine': f'{platform.processor() or platform.machine()}, '
                 f'{len(__import__("os").sched_getaffinity(0))} cores',
      'rounds': args.rounds,
      'steps': args.steps,
      'median_images_per_second': medians,
      'ours_over_best_pytorch': {k: v / best_torch for k, v in medians.items()
                                 if k.startswith('vit_jax')},
      'runs': results,
  }
  (HERE / 'pytorch_comparison.json').write_text(json.dumps(summary, indent=2))
  print('\n| step (ViT-Tiny-CIFAR_4, batch 128, f32, AdamW) | median img/s | '
        'ours / best PyTorch |')
  print('| --- | --- | --- |')
  for name, rate in medians.items():
    ratio = f'{rate / best_torch:.2f}' if name.startswith('vit_jax') else ''
    print(f'| {name} | {rate:.1f} | {ratio} |')


if __name__ == '__main__':
  main()

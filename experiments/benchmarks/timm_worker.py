"""timm's train steps, timed on request in a process of their own (not ours)."""

# It answers each JSON line with one: first its versions or why torch and timm
# do not import, then `prepare` (name, architecture, batch, compiled, dtype) ->
# warmup_seconds; `time` (name, steps) -> seconds; `clear` -> {}; or `error`.

import contextlib
import functools
import json
import os
import subprocess
import sys
import time
import traceback

from experiments.benchmarks import study_step
from vit_jax import errors


def timm_vit(image: int, patch: int, hidden: int, layers: int, heads: int,
             mlp: int, classes: int, dropout: float, parameters: int):
  """timm's VisionTransformer as our ViT of these sizes (train mode), checked."""
  from timm.models import vision_transformer  # pylint: disable=g-import-not-at-top
  from torch import nn  # pylint: disable=g-import-not-at-top

  # Dropout where ours has it: after the position embedding (pos_drop), the
  # attention's projection and the MLP's layers (proj_drop, drop1, drop2);
  # none on attention weights, the head (drop_rate) or paths.
  model = vision_transformer.VisionTransformer(
      img_size=image, patch_size=patch, num_classes=classes,
      global_pool='token', class_token=True, embed_dim=hidden, depth=layers,
      num_heads=heads, mlp_ratio=mlp / hidden, qkv_bias=True,
      norm_layer=functools.partial(nn.LayerNorm,
                                   eps=1e-6), act_layer=functools.partial(
                                       nn.GELU, approximate='tanh'),
      pos_drop_rate=dropout, proj_drop_rate=dropout, attn_drop_rate=0.0,
      drop_rate=0.0, drop_path_rate=0.0, weight_init='jax')
  counted = sum(p.numel() for p in model.parameters())
  assert counted == parameters, (counted, parameters)
  layer_norms = [m for m in model.modules() if isinstance(m, nn.LayerNorm)]
  assert len(layer_norms) == 2 * layers + 1, len(layer_norms)
  assert all(m.eps == 1e-6 for m in layer_norms)
  dropouts = [m.p for m in model.modules() if isinstance(m, nn.Dropout)]
  # pos_drop + per block (attn_drop, proj_drop, drop1, drop2) + head_drop.
  assert sorted(dropouts) == sorted([dropout] +
                                    [0.0, dropout, dropout, dropout] * layers +
                                    [0.0]), dropouts
  return model


def train_step(architecture: dict, batch: int, compiled: str, device: str,
               dtype: str):
  """`timm_vit(**architecture)`'s AdamW step in `dtype`, `compiled` or not."""
  import torch  # pylint: disable=g-import-not-at-top
  from torch import nn  # pylint: disable=g-import-not-at-top

  # What torch.compile compiles of a step: 'nothing', the whole 'step'
  # (forward, backward and AdamW's update in one graph), or the 'model' alone
  # beside AdamW's fused CUDA kernel (the usual recipe of PyTorch's own
  # examples).
  if compiled not in ('nothing', 'step', 'model'):
    raise ValueError(f'compiled={compiled!r}; use nothing, step or model')
  model = timm_vit(**architecture).to(device)
  fused = compiled == 'model' and device == 'cuda'
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01,
                                fused=fused or None)
  loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
  image, classes = architecture['image'], architecture['classes']
  images = torch.randn(batch, 3, image, image, device=device)
  labels = torch.randint(0, classes, (batch,), device=device)

  model.eval()  # The head starts at zero (as ours), so check the features too.
  with torch.no_grad():
    features = model.forward_features(images)
    logits = model.forward_head(features)
  assert logits.shape == (batch, classes), logits.shape
  assert torch.isfinite(features).all() and torch.isfinite(logits).all()

  def step():
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(device, dtype=torch.bfloat16,
                        enabled=dtype == 'bfloat16'):
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


def _serve():
  # The protocol gets the real stdout; whatever torch, timm or inductor
  # print goes to stderr instead of between its lines.
  protocol = os.fdopen(os.dup(1), 'w', buffering=1)
  os.dup2(2, 1)

  def reply(message: dict):
    protocol.write(json.dumps(message) + '\n')

  try:
    import timm  # pylint: disable=g-import-not-at-top
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    reply({'error': f'{type(e).__name__}: {e}'})
    return
  device = 'cuda' if torch.cuda.is_available() else 'cpu'
  reply(
      dict(torch=torch.__version__, timm=timm.__version__, device=device,
           threads=torch.get_num_threads()))
  prepared = {}
  for line in sys.stdin:
    request = json.loads(line)
    try:
      reply(_handle(request, prepared, device))
    except Exception as e:  # pylint: disable=broad-except
      # One contender's failure is its row's note; the others still run.
      traceback.print_exc()
      reply({'error': errors.first_line(e)})


def _handle(request: dict, prepared: dict, device: str) -> dict:
  import torch  # pylint: disable=g-import-not-at-top
  if request['op'] == 'prepare':
    torch.manual_seed(0)
    step = train_step(request['architecture'], request['batch'],
                      request['compiled'], device, request['dtype'])
    warmup = run_steps(step, 3, device)
    prepared[request['name']] = step
    return {'warmup_seconds': sum(warmup)}
  if request['op'] == 'time':
    step = prepared[request['name']]
    run_steps(step, 2, device)
    return {'seconds': run_steps(step, request['steps'], device)}
  if request['op'] == 'clear':
    prepared.clear()
    if device == 'cuda':
      torch.cuda.empty_cache()
    return {}
  raise ValueError(f'unknown op {request["op"]!r}')


class WorkerError(Exception):
  """The worker refused a request or ended."""


class TimmWorker:
  """A worker under `python`: `send` queues, `receive` answers the oldest."""

  def __init__(self, python: str):
    self.process = subprocess.Popen(
        [python, '-m', 'experiments.benchmarks.timm_worker'],
        cwd=study_step.REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    try:
      hello = self.receive()
    except WorkerError:
      self.close()
      raise
    self.versions = {'torch': hello['torch'], 'timm': hello['timm']}
    self.threads = hello['threads']

  def send(self, **request):
    """Queues `request`; an ended worker's answer is an error."""
    with contextlib.suppress(BrokenPipeError):  # `receive` says it ended
      print(json.dumps(request), file=self.process.stdin, flush=True)

  def receive(self) -> dict:
    if not (line := self.process.stdout.readline()):
      raise WorkerError(f'the timm worker ended (exit status '
                        f'{self.process.wait()}); its output is above.')
    answer = json.loads(line)
    if 'error' in answer:
      raise WorkerError(answer['error'])
    return answer

  def close(self):
    with contextlib.suppress(BrokenPipeError):  # it had ended
      self.process.stdin.close()
    self.process.wait()


if __name__ == '__main__':
  _serve()

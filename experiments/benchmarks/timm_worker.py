"""timm's train steps, timed on request in a process of their own, so that
`gpu.py` alternates rounds between them and our compiled steps without
recompiling either, and without torch in the project's process.

`python -m experiments.benchmarks.timm_worker` (from the repository's root)
reads one JSON request a line and answers one JSON line each: `prepare` (name,
architecture, batch, compiled) -> warmup_seconds; `time` (name, steps) ->
seconds; `clear` -> {}. A failed request is answered {"error": ...}; its first
line names torch's and timm's versions, or why they do not import.
"""

import json
import os
import subprocess
import sys
import traceback

from experiments.benchmarks import compare_pytorch
from vit_jax import errors

REPO = compare_pytorch.REPO


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
  reply({
      'torch': torch.__version__, 'timm': timm.__version__, 'device': device
  })
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
    architecture = compare_pytorch.Architecture(**request['architecture'])
    model, _ = compare_pytorch.timm_vit(architecture)
    step = compare_pytorch.train_step(model, architecture, request['batch'],
                                      request['compiled'], device,
                                      bfloat16=True)
    warmup = compare_pytorch.run_steps(step, 3, device)
    prepared[request['name']] = step
    return {'warmup_seconds': sum(warmup)}
  if request['op'] == 'time':
    step = prepared[request['name']]
    compare_pytorch.run_steps(step, 2, device)
    return {
        'seconds': compare_pytorch.run_steps(step, request['steps'], device)
    }
  if request['op'] == 'clear':
    prepared.clear()
    if device == 'cuda':
      torch.cuda.empty_cache()
    return {}
  raise ValueError(f'unknown op {request["op"]!r}')


class WorkerError(Exception):
  """The worker refused a request or ended."""


class TimmWorker:
  """A worker under `python`: `send` queues a request, `receive` waits for the
  oldest unanswered one's reply."""

  def __init__(self, python: str):
    self.process = subprocess.Popen(
        [python, '-m', 'experiments.benchmarks.timm_worker'], cwd=REPO,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
      hello = self.receive()
    except WorkerError:
      self.close()
      raise
    self.versions = {'torch': hello['torch'], 'timm': hello['timm']}

  def send(self, **request):
    """Queues `request`; an ended worker's answer is an error."""
    try:
      self.process.stdin.write(json.dumps(request) + '\n')
      self.process.stdin.flush()
    except BrokenPipeError:
      pass  # `receive` says it ended

  def receive(self) -> dict:
    line = self.process.stdout.readline()
    if not line:
      raise WorkerError(f'the timm worker ended (exit status '
                        f'{self.process.wait()}); its output is above.')
    answer = json.loads(line)
    if 'error' in answer:
      raise WorkerError(answer['error'])
    return answer

  def close(self):
    try:
      self.process.stdin.close()
    except BrokenPipeError:
      pass  # it had ended
    self.process.wait()


if __name__ == '__main__':
  _serve()

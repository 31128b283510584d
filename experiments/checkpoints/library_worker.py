"""The libraries' side of `check_libraries.py`, in a venv of their own."""

# Under a venv with torch, timm, transformers and safetensors (no numpy nor
# vit_jax): `check`'s JSON request (images, exports, native_dir) on stdin; its
# last line on stdout the answer.

import functools
import json
import os
import pathlib
import sys

import safetensors
from safetensors.torch import load_file
import timm
from timm.layers import StdConv2dSame
from timm.layers.padding import pad_same
from timm.models import save_for_hf
import torch
import transformers

# name: (library, what makes it): timm's architecture and its arguments beside
# act_layer='gelu_tanh' and 10 classes, or transformers' ViTConfig.
NATIVE = {
    'timm_vit_small_patch16_224': ('timm', ('vit_small_patch16_224', {})),
    'timm_vit_tiny_patch16_224_gap': ('timm', ('vit_tiny_patch16_224', {
        'class_token': False, 'global_pool': 'avg', 'fc_norm': False
    })),
    # The hybrid: ResNetV2 stages (2, 2, 2, 2).
    'timm_vit_small_r26_s32_224': ('timm', ('vit_small_r26_s32_224', {})),
    'hf_vit_s16': ('transformers',
                   dict(hidden_size=384, num_hidden_layers=12,
                        num_attention_heads=6, intermediate_size=1536,
                        hidden_act='gelu_pytorch_tanh', layer_norm_eps=1e-6,
                        num_labels=10, image_size=224, patch_size=16)),
}


def _arguments(arguments: dict) -> str:
  return ', '.join(f'{key}={value!r}' for key, value in arguments.items())


def _logits(model, images) -> list:
  with torch.no_grad():
    out = model(images)
  out = getattr(out, 'logits', out)
  assert out.dtype == torch.float32, out.dtype
  return out.double().tolist()


def _perturb(model, generator) -> None:
  """Every bias, norm and head parameter drawn at random, so a misplaced one shows."""
  with torch.no_grad():
    for name, parameter in model.named_parameters():
      noise = torch.randn(parameter.shape, generator=generator)
      if 'norm' in name and name.endswith('weight'):
        parameter.copy_(1 + 0.1 * noise)
      elif name.endswith('bias') or name.startswith(('head.', 'classifier.')):
        parameter.copy_(0.02 * noise)


def _official_stem(model) -> None:
  """A timm hybrid's stem with the official epsilons (see README.md)."""

  def forward(x, conv):
    if conv.same_pad:
      x = pad_same(x, conv.kernel_size, conv.stride, conv.dilation)
    flat = conv.weight.reshape(conv.out_channels, -1)
    centred = flat - flat.mean(1, keepdim=True)
    weight = centred / (centred.std(1, unbiased=False, keepdim=True) + 1e-5)
    return torch.nn.functional.conv2d(x, weight.reshape_as(conv.weight),
                                      conv.bias, conv.stride, conv.padding,
                                      conv.dilation, conv.groups)

  for module in model.modules():
    if isinstance(module, torch.nn.GroupNorm):
      module.eps = 1e-6
    if isinstance(module, StdConv2dSame):
      module.forward = lambda x, conv=module: forward(x, conv)


def _timm_export(directory: str, images, official_stem: bool = False,
                 **overrides) -> dict:
  model = timm.create_model(f'local-dir:{directory}', pretrained=True,
                            **overrides).eval()
  if official_stem:
    _official_stem(model)
  act = type(model.blocks[0].mlp.act).__name__
  eps = model.blocks[0].norm1.eps
  return dict(logits=_logits(model, images), act=act, eps=eps,
              architecture=model.pretrained_cfg.get('architecture'))


def _hf_export(directory: str, images, **overrides) -> dict:
  model, info = transformers.ViTForImageClassification.from_pretrained(
      directory, output_loading_info=True, **overrides)
  model.eval()
  # Every array of the folder used, none missing, none reshaped.
  if problems := {key: value for key, value in info.items() if value}:
    raise RuntimeError(f'{directory}: transformers loaded it with {problems}')
  assert next(model.parameters()).dtype == torch.float32
  config = model.config
  return dict(logits=_logits(model, images), act=config.hidden_act,
              eps=config.layer_norm_eps,
              attn_implementation=getattr(config, '_attn_implementation', None))


def _native(name: str, directory: pathlib.Path, images) -> dict:
  torch.manual_seed(0)
  library, made = NATIVE[name]
  if library == 'timm':
    architecture, arguments = made
    arguments = {'act_layer': 'gelu_tanh', 'num_classes': 10, **arguments}
    model = timm.create_model(architecture, pretrained=False, **arguments)
    description = (f'timm.create_model({architecture!r}, '
                   f'{_arguments(arguments)}), saved with '
                   'timm.models.save_for_hf(safe_serialization=True)')
    save = functools.partial(
        save_for_hf, model, str(directory),
        model_args={'num_heads': model.blocks[0].attn.num_heads},
        safe_serialization=True)
  else:
    model = transformers.ViTForImageClassification(
        transformers.ViTConfig(**made))
    description = (f'ViTForImageClassification(ViTConfig({_arguments(made)})),'
                   ' saved with save_pretrained')
    save = functools.partial(model.save_pretrained, str(directory),
                             safe_serialization=True)
  _perturb(model, torch.Generator().manual_seed(len(name)))
  model.eval()
  save()
  logits = _logits(model, images)
  # The folder is the library's own: it reads it back to the same logits.
  reread = _timm_export if library == 'timm' else _hf_export
  rereads_identically = reread(str(directory), images)['logits'] == logits
  answer = dict(dir=str(directory), library=library, description=description,
                logits=logits, files=sorted(os.listdir(directory)),
                library_rereads_identically=rereads_identically)
  if hasattr(getattr(model, 'patch_embed', None), 'backbone'):
    _official_stem(model)
    answer['logits_official_stem'] = _logits(model, images)
  return answer


def main():
  # The answer gets the real stdout; whatever the libraries print goes to
  # stderr.
  answer = os.fdopen(os.dup(1), 'w')
  os.dup2(2, 1)
  request = json.load(sys.stdin)

  torch.set_num_threads(1)  # a light neighbour of the test suite
  images = load_file(request['images'])['images']
  assert images.dtype == torch.float32, images.dtype
  images = images.permute(0, 3, 1, 2).contiguous()  # NHWC -> NCHW

  exports = {}
  for export in request['exports']:
    result = {}
    if path := export.get('timm'):
      load = functools.partial(_timm_export, path, images)
      result.update(timm=load(), timm_exact_gelu=load(act_layer='gelu'))
      if export.get('hybrid'):
        result['timm_official_stem'] = load(official_stem=True)
    if path := export.get('hf'):
      load = functools.partial(_hf_export, path, images)
      result.update(hf=load(), hf_exact_gelu=load(hidden_act='gelu'))
      result['hf_eps_1e-12'] = load(layer_norm_eps=1e-12)
    exports[export['name']] = result
    print(f'worker: {export["name"]} done', file=sys.stderr, flush=True)

  natives = {}
  for name in NATIVE:
    directory = pathlib.Path(request['native_dir']) / name
    directory.mkdir(parents=True)
    natives[name] = _native(name, directory, images)
    print(f'worker: {name} done', file=sys.stderr, flush=True)

  libraries = torch, timm, transformers, safetensors
  versions = {m.__name__: m.__version__ for m in libraries}
  versions['python'] = sys.version.split()[0]
  reply = dict(versions=versions, torch_threads=torch.get_num_threads(),
               exports=exports, natives=natives)
  print(json.dumps(reply), file=answer, flush=True)


if __name__ == '__main__':
  main()

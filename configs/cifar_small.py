r"""The small-data study: a model trained on 5,000 CIFAR-10 images for 30 epochs.

The study trained ViT-Tiny, SimpleCNN and SmallResNet on 5,000 CIFAR-10
training images and tested on 1,000, with AdamW (lr 1e-3, weight decay 0.01),
linear warmup then cosine decay (here 5 warmup epochs for the ViT, 3 for
the CNNs), and label smoothing 0.1. It does not state its batch sizes nor
whether it augmented; experiments/small_data measures both. The CNNs' batch sizes here
(64 for SimpleCNN, 256 for SmallResNet) are the ones whose validation
accuracy is nearest the study's test accuracy; the ViT's is 128; every model is trained on random crops (4-pixel padding) and
horizontal flips.

Run (the argument after ':' picks the model: vit, simple_cnn, small_resnet;
`--config.data_dir=DIR` reads an unpacked CIFAR-10 instead of the download):

  python -m vit_jax.main --config=configs/cifar_small.py --workdir=/tmp/w30
  python -m vit_jax.main --config=configs/cifar_small.py:simple_cnn \
      --workdir=/tmp/simple_cnn

Expected, with 5,000 validation images held out to choose the best epoch
(`--config.validation_examples=5000`: from the download's 45,000 images
outside the study's 5,000, or `--config.validation_dir` as
experiments/small_data's sweep passes it): the test accuracy there, over 3
seeds on the project's 2-core CPU machine, ViT-Tiny 50.8 ± 0.7, SimpleCNN
69.6 ± 0.5 and SmallResNet 63.6 ± 0.1 (experiments/small_data/README.md).
"""

from vit_jax import config_schema

# CIFAR-10 training-set channel statistics of pixels in [0, 1], the study's
# normalization.
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)

MODELS = {
    # name: (registered model, warmup epochs, batch size)
    'vit': ('ViT-Tiny-CIFAR_4', 5, 128),
    'simple_cnn': ('SimpleCNN', 3, 64),
    'small_resnet': ('SmallResNet', 3, 256),
}


def get_config(model: str = 'vit'):
  if model not in MODELS:
    raise ValueError(f"Unknown model {model!r} after ':'; use one of "
                     f'{", ".join(MODELS)}.')
  config = config_schema.defaults()
  # The ViT's dropout, 0.1, is the registry's (the study does not state it).
  config.model, config.warmup_epochs, config.batch_size = MODELS[model]

  # The study's data: the first 1,000 images of each of the 5 training files
  # (what ../shared/data/cifar10-5k holds), from the full release too, and
  # 1,000 test images, copied to every device once, and cropped (4-pixel
  # padding) and flipped there.
  config.dataset = 'cifar10'
  config.train_examples_per_file = 1000
  config.test_examples = 1000
  config.input_pipeline = 'on_device'
  config.augment = True
  config.pixel_mean = CIFAR10_MEAN
  config.pixel_std = CIFAR10_STD
  config.image_size = 32

  # Logged and evaluated once an epoch, as the study reports it, and
  # checkpointed once an epoch at most every 30 s (the *_every_steps fields
  # at 0, checkpoint_min_seconds at its default).
  config.num_epochs = 30
  config.eval_batch_size = 200
  config.optimizer = 'adamw'
  config.learning_rate = 1e-3
  config.weight_decay = 0.01
  config.label_smoothing = 0.1

  # How to run fastest on a CPU (ignored on GPU/TPU), measured on 2 cores
  # (experiments/benchmarks/README.md): the ViT's small matmuls run fastest
  # split over host devices (4, measured as fast as 2) with XLA's default
  # (YNNPACK) kernels; the CNNs' weight gradients run many times faster with
  # Eigen's multi-threaded convolutions, which one device runs on all cores.
  if model == 'vit':
    config.cpu_devices = 4
  else:
    config.cpu_devices = 1
    config.cpu_compiler_options.xla_cpu_experimental_ynn_fusion_type = ''
  return config

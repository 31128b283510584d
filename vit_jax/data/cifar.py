"""CIFAR-10 and CIFAR-100: facts about the data sets."""

# CIFAR-10 training-set channel statistics of pixels in [0, 1]
# (`config.pixel_mean` and `config.pixel_std` of the CIFAR configs).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)

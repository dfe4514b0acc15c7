"""MNIST for the job: torchvision's real one, or a synthetic MNIST-shaped stand-in.

The synthetic set needs no download (the local cluster and the tests have no internet) and
is learnable: each of the 10 classes is a fixed random stroke pattern, and every image is
its class pattern, randomly shifted by up to 2 pixels, under heavy noise. Every replica, on
every restart, generates the identical set from the same seed, as AdaptDL's sampler needs.
"""

import torch
from torch.utils.data import TensorDataset

IMAGE_SIZE = 28
NUM_CLASSES = 10
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081  # the real example's normalisation
TEST_SAMPLES = 1000


def synthetic_mnist(samples: int, seed: int) -> TensorDataset:
    """`samples` images 1x28x28 (float32, normalised) and labels 0-9 (int64)."""
    g = torch.Generator().manual_seed(seed)
    # Class patterns from the same seed for train and test sets: one "digit" each.
    patterns = (torch.rand(NUM_CLASSES, IMAGE_SIZE, IMAGE_SIZE,
                           generator=torch.Generator().manual_seed(0)) > 0.8).float()
    labels = torch.randint(0, NUM_CLASSES, (samples,), generator=g)
    images = patterns[labels]
    shifts = torch.randint(-2, 3, (samples, 2), generator=g)
    for i, (dy, dx) in enumerate(shifts.tolist()):
        images[i] = torch.roll(images[i], shifts=(dy, dx), dims=(0, 1))
    images = (images + 0.7 * torch.randn(images.shape, generator=g)).clamp(0, 1)
    images = ((images - MNIST_MEAN) / MNIST_STD).unsqueeze(1)
    return TensorDataset(images, labels)


def load(kind: str, train_samples: int, data_dir: str):
    """(train set, test set) of (image, label) pairs."""
    if kind == "synthetic":
        return synthetic_mnist(train_samples, seed=1), synthetic_mnist(TEST_SAMPLES, seed=2)
    from torchvision import datasets, transforms
    transform = transforms.Compose([transforms.ToTensor(),
                                    transforms.Normalize((MNIST_MEAN,), (MNIST_STD,))])
    return (datasets.MNIST(data_dir, train=True, download=True, transform=transform),
            datasets.MNIST(data_dir, train=False, transform=transform))

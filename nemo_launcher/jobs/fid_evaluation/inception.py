"""Inception-v3 pool features for FID, from torch-fidelity's port of the TensorFlow graph FID was defined with.

    network = load_inception("/models/weights-inception-2015-12-05-6726825d.pth")   # a local file; no download
    features = inception_features(network, images)                                # PIL images -> [n, 2048]

The weights file is torch-fidelity's state dict (its release `weights-inception-2015-12-05-6726825d.pth`, or
`write_random_inception(path)`'s stand-in for tests and tiny runs). torch-fidelity's package `__init__` imports its
CLIP and DINOv2 extractors, which import torchvision, and torchvision's wheels do not import with the CPU torch
(and break `transformers` when installed): so requirements-nodeps.txt installs torch-fidelity without its declared
torchvision dependency, and the job package's import hook (jobs/common/import_hooks.py) loads the package without
running that `__init__`, so the one module needed imports.
"""

import os

# torch-fidelity's name for the 2048-wide pool features FID uses.
POOL_FEATURES = "2048"


def _inception_class():
    # jobs/common/import_hooks.py loads the torch_fidelity package without its __init__ where torchvision is absent.
    try:
        from torch_fidelity.feature_extractor_inceptionv3 import FeatureExtractorInceptionV3
    except ModuleNotFoundError as error:
        if error.name != "torch_fidelity":
            raise
        raise ImportError("torch-fidelity is not installed: pip install --no-deps -r requirements-nodeps.txt") from None
    return FeatureExtractorInceptionV3


def load_inception(weights_path: str, device="cpu"):
    if not os.path.isfile(weights_path):
        raise FileNotFoundError(weights_path)
    network = _inception_class()("inception-v3-compat", [POOL_FEATURES], feature_extractor_weights_path=weights_path)
    return network.to(device)


def write_random_inception(path: str, seed: int = 0) -> str:
    """A randomly initialised Inception state dict in torch-fidelity's format: the stand-in for the real weights
    where they cannot be fetched (tests, tiny configs). Its features still separate images, not as FID's do."""
    import torch

    inception = _inception_class()

    class _Fresh(inception):
        def load_state_dict(self, *args, **kwargs):  # keep the fresh initialisation instead of reading weights
            return None

    torch.manual_seed(seed)
    placeholder = f"{path}.empty-{os.getpid()}"
    torch.save({}, placeholder)
    try:
        network = _Fresh("inception-v3-compat", [POOL_FEATURES], feature_extractor_weights_path=placeholder)
    finally:
        os.remove(placeholder)
    # PyTorch's default convolution init passes on about a sixth of the variance through each conv + ReLU, so
    # ~20 layers leave features near 1e-8 and every distance at round-off; a batch-norm gain of sqrt(6) keeps them
    # of order one.
    for name, tensor in network.state_dict().items():
        if name.endswith("bn.weight"):
            tensor.fill_(6**0.5)
    state = network.state_dict()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    torch.save(state, path + ".tmp")
    os.replace(path + ".tmp", path)
    return path


def inception_features(network, images: list, batch_size: int = 32):
    """[n, 2048] float64 NumPy features of PIL images (RGB); the network resizes to 299 pixels itself."""
    import numpy as np
    import torch

    device = next(network.parameters()).device
    rows = []
    for start in range(0, len(images), batch_size):
        batch = np.stack(
            [np.asarray(image.convert("RGB"), dtype=np.uint8) for image in images[start : start + batch_size]]
        )
        pixels = torch.from_numpy(batch).permute(0, 3, 1, 2).contiguous().to(device)
        with torch.no_grad():
            (features,) = network(pixels)
        rows.append(features.double().cpu().numpy())
    return np.concatenate(rows) if rows else np.zeros((0, 2048))

"""The Fréchet distance between two Gaussians fitted to feature sets (the FID formula), in NumPy.

    mu, sigma = statistics(features)             # features: [samples, dims]
    fid = frechet_distance(mu_a, sigma_a, mu_b, sigma_b)
    root = psd_sqrt(sigma_a)                     # once for a reference set scored against many others
    fid = frechet_distance(mu_a, sigma_a, mu_b, sigma_b, root_a=root)

d^2 = |mu_a - mu_b|^2 + tr(S_a) + tr(S_b) - 2 tr((S_a S_b)^(1/2)). The last trace is taken as the sum of the square
roots of the eigenvalues of S_a^(1/2) S_b S_a^(1/2), a symmetric positive semi-definite matrix with the same
eigenvalues as S_a S_b: symmetric eigensolvers stay real where a general matrix square root of the product picks
up imaginary round-off, which happens whenever there are fewer samples than dimensions (singular covariances).
"""

import numpy as np


def statistics(features) -> tuple[np.ndarray, np.ndarray]:
    """(mean, covariance with the n - 1 denominator) of [samples, dims] features, in float64."""
    features = np.asarray(features, dtype=np.float64)
    if features.ndim != 2 or features.shape[0] < 2:
        raise ValueError(f"FID needs at least 2 feature vectors, got an array of shape {features.shape}")
    return features.mean(axis=0), np.cov(features, rowvar=False)


def psd_sqrt(matrix) -> np.ndarray:
    """The symmetric square root of a covariance (negative round-off eigenvalues taken as 0)."""
    matrix = np.atleast_2d(matrix).astype(np.float64)
    values, vectors = np.linalg.eigh((matrix + matrix.T) / 2)
    return (vectors * np.sqrt(np.clip(values, 0, None))) @ vectors.T


def frechet_distance(mu_a, sigma_a, mu_b, sigma_b, root_a=None) -> float:
    mu_a, mu_b = np.asarray(mu_a, np.float64), np.asarray(mu_b, np.float64)
    sigma_a, sigma_b = np.atleast_2d(sigma_a).astype(np.float64), np.atleast_2d(sigma_b).astype(np.float64)
    if mu_a.shape != mu_b.shape or sigma_a.shape != sigma_b.shape:
        raise ValueError(f"feature sizes differ: {mu_a.shape} and {mu_b.shape}")
    # A 2048-dimension eigendecomposition costs seconds; the caller may keep the reference set's root.
    root_a = psd_sqrt(sigma_a) if root_a is None else np.asarray(root_a, np.float64)
    middle = root_a @ sigma_b @ root_a
    cross = np.sqrt(np.clip(np.linalg.eigvalsh((middle + middle.T) / 2), 0, None)).sum()
    distance = float(((mu_a - mu_b) ** 2).sum() + np.trace(sigma_a) + np.trace(sigma_b) - 2 * cross)
    # Identical sets give round-off of either sign; a distance is never below zero.
    return max(distance, 0.0)

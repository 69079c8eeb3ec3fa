"""OpenMax scored per sample: each sample's score is what the method defines for that sample alone.

pytorch-ood 0.4.0's ``OpenMax.predict`` computes distances only to the centres of classes that some sample in the same
call predicts (top-1) and reads 0 for the others, so a sample's score depends on the samples scored beside it. Here the
fit stays pytorch-ood's (class centres and Weibull tails); the prediction is its formula, vectorised, with each
sample's distances to every class of its own top-alpha ranking (as in Bendale & Boult's algorithm), which is what
pytorch-ood's ``predict`` gives when every class is predicted in the call.
"""

from __future__ import annotations

import numpy as np
from pytorch_ood.api import RequiresFittingException
from pytorch_ood.detector import OpenMax
from scipy.stats import exponweib

ROWS = 512  # samples per step: bounds the (rows, alpha, classes) distance array; rows are independent


def _tails(fitted, num_classes: int) -> tuple[np.ndarray, ...]:
    """Per class: centre, Weibull shape and scale, tail translation and minimum, and whether the class was fitted."""
    centers = np.zeros((num_classes, fitted.n_dims), dtype=next(iter(fitted.centers.values())).dtype)
    shape, scale, shift, low = np.ones(num_classes), np.ones(num_classes), np.zeros(num_classes), np.zeros(num_classes)
    known = np.zeros(num_classes, dtype=bool)
    for clazz, tail in fitted.distributions.items():
        centers[clazz], shape[clazz], scale[clazz] = fitted.centers[clazz], tail.c, tail.scale
        shift[clazz], low[clazz], known[clazz] = tail.translation, tail.min_val, True
    return centers, shape, scale, shift, low, known


def _distances(fitted, x: np.ndarray, centers: np.ndarray) -> np.ndarray:
    """pytorch-ood's distance of each row of ``x`` to each of its centres (``centers``: rows x alpha x dims)."""
    euclid = None if fitted.euclid_weight == 0 else np.linalg.norm(x[:, None, :] - centers, axis=2)
    if fitted.cos_weight == 0:
        return euclid
    dots = (centers @ x[:, :, None])[..., 0]
    cos = 1 - dots / (np.linalg.norm(x, axis=1)[:, None] * np.linalg.norm(centers, axis=2))
    return cos if euclid is None else fitted.cos_weight * cos + fitted.euclid_weight * euclid


def unknown_probability(detector: OpenMax, logits: np.ndarray) -> np.ndarray:
    """The OpenMax probability of the unknown class (pytorch-ood's outlier score) of each row of ``logits``."""
    fitted = detector._openmax
    if fitted is None:
        raise RequiresFittingException()
    if logits.shape[1] != fitted.n_dims:
        raise ValueError(f"OpenMax was fitted on {fitted.n_dims} logits, got {logits.shape[1]}")
    alpha = fitted.alpha
    centers, shape, scale, shift, low, known = _tails(fitted, logits.shape[1])
    alpha_weights = np.array([((alpha + 1) - i) / float(alpha) for i in range(1, alpha + 1)])
    out = np.empty(len(logits))
    for start in range(0, len(logits), ROWS):
        x = logits[start : start + ROWS]
        top = np.argsort(x, axis=1)[:, -alpha::][:, ::-1][:, :alpha]  # pytorch-ood's ranking, ties included
        dist = _distances(fitted, x, centers[top]).astype(np.float64)
        cdf = exponweib.cdf(dist + shift[top] - low[top], a=1, c=shape[top], loc=0, scale=scale[top])
        outlier = np.where(known[top], cdf, 1.0)  # an unfitted class counts as an outlier, as in pytorch-ood
        wscores = np.ones(x.shape)
        np.put_along_axis(wscores, top, 1 - outlier * alpha_weights, axis=1)
        revised = np.empty((len(x), x.shape[1] + 1))
        revised[:, 1:] = x * wscores
        revised[:, 0] = np.sum(x * (1 - wscores), axis=1)
        e = np.exp(np.minimum(revised, 709))
        out[start : start + ROWS] = e[:, 0] / np.sum(e, axis=1)
    return out

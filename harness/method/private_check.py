"""The private images' check (docs/method.md, "Private images"): a (model, kappa) pair's severity levels scored on the
benchmark's private test images, which were never published, beside its public numbers, and a test of whether the
private mean ood-auroc falls below the public one by more than chance. A model that memorised the public images (their
hashes, say) scores near 1 on them and near chance on the private ones. Pure numpy, no I/O.

The public and private test images are disjoint samples of the same classes, so the two means are independent: the
variance of their difference is the sum of their variances, each the DeLong variance of a mean of levels' AUROCs
(:func:`harness.method.intervals.auroc_covariance`, the levels sharing their ID images). The test is one-sided (a
private score above the public one is no sign of memorisation) at ``ALPHA``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from statistics import NormalDist

import numpy as np

from harness.errors import HarnessError
from harness.method.intervals import auroc_covariance
from harness.method.severity import SeverityLevels

ALPHA = 0.01  # the test's level: an honest model is flagged about once in a hundred entries
Z_CAP = 40.0  # the test statistic's bound (a difference with no variance at all is that far out)


@dataclass(frozen=True)
class PrivateCheck:
    """The private numbers of one (model, kappa) pair beside its public ones, and the test of their difference."""

    num_id: int
    num_ood: int
    mean_ood_auroc: float
    level_ood_auroc: list[float]
    difference: float  # public mean ood-auroc minus the private one
    z: float
    p_value: float
    alpha: float
    reproduced: bool  # the private numbers do not fall below the public ones at ``alpha``

    def as_dict(self) -> dict:
        return asdict(self)


def _mean_and_variance(positive: np.ndarray, negative: np.ndarray, members: list[np.ndarray]) -> tuple[list, float]:
    aurocs, covariance = auroc_covariance(positive, negative, members)
    weights = np.full(len(aurocs), 1.0 / len(aurocs))
    return [float(a) for a in aurocs], float(weights @ covariance @ weights)


def level_members(levels: SeverityLevels, ood_labels: np.ndarray, what: str) -> list[np.ndarray]:
    """Each level's rows among ``ood_labels`` (the rows of its classes); at least 2 each, or one line naming the
    level."""
    members = [np.flatnonzero(np.isin(ood_labels, classes)) for classes in levels.classes]
    for level, rows in enumerate(members):
        if len(rows) < 2:
            raise HarnessError(f"level {level} has {len(rows)} {what} OOD test images; at least 2 are needed")
    return members


def private_check(
    levels: SeverityLevels,
    public: tuple[np.ndarray, np.ndarray, np.ndarray],
    private: tuple[np.ndarray, np.ndarray, np.ndarray],
    alpha: float = ALPHA,
) -> PrivateCheck:
    """``levels`` (from the public estimation split) scored on the ``private`` test images beside the ``public`` ones,
    each ``(ID scores, OOD scores, OOD labels)`` of the kappa's ranking scores, and the one-sided test that the
    private mean ood-auroc is below the public one."""
    public_aurocs, public_var = _mean_and_variance(public[0], public[1], level_members(levels, public[2], "public"))
    members = level_members(levels, private[2], "private")
    if len(private[0]) < 2:
        raise HarnessError(f"the private part has {len(private[0])} ID test images; at least 2 are needed")
    private_aurocs, private_var = _mean_and_variance(private[0], private[1], members)
    mean_public = math.fsum(public_aurocs) / len(public_aurocs)
    mean_private = math.fsum(private_aurocs) / len(private_aurocs)
    difference = mean_public - mean_private
    spread = math.sqrt(public_var + private_var)
    if spread > 0:
        z = max(-Z_CAP, min(Z_CAP, difference / spread))
    else:  # no variance on either side (both perfectly separated): only a difference at all counts
        z = math.copysign(Z_CAP, difference) if difference else 0.0
    p_value = 1.0 - NormalDist().cdf(z)
    return PrivateCheck(
        num_id=int(len(private[0])),
        num_ood=int(len(np.unique(np.concatenate(members)))),
        mean_ood_auroc=mean_private,
        level_ood_auroc=private_aurocs,
        difference=difference,
        z=z,
        p_value=p_value,
        alpha=alpha,
        reproduced=not p_value < alpha,
    )

"""Selective prediction and calibration on the ID test set (docs/method.md section 4, "ID metrics"). Pure numpy.

The definitions of the companion paper, Galil, Dabbah & El-Yaniv, *What can we learn from the selective prediction
and uncertainty estimation performance of 523 ImageNet classifiers?* (ICLR 2023), and of its code, with ties in
confidence handled deterministically:

- :func:`aurc`: the mean selective risk over the coverages ``1/n, 2/n, ..., 1`` (Geifman et al. 2018): samples in
  decreasing confidence, ``risk(i)`` = the errors among the first ``i`` over ``i``. Samples of equal confidence have
  no order, so ``risk(i)`` inside a tie takes the errors' *expected* number under a uniformly random order of the tied
  samples (linear across the tie): the mean of the paper's AURC over every tie-breaking, computed exactly. Without
  ties it is the paper's number.
- :func:`e_aurc`: ``aurc - optimal_aurc``, with the paper's optimum ``r + (1 - r) ln(1 - r)``, ``r`` = the error rate.
- :func:`coverage_at_accuracy` (SAC, the paper's *selective accuracy constraint*): the largest coverage whose
  selective accuracy reaches the target. A threshold keeps a whole tie or none of it.
- :func:`ece`: expected calibration error, 15 bins, equal-width by default (the paper's), equal-mass on request.
- :func:`nll`, :func:`brier`: for confidences that are probabilities; a 1-D confidence against correctness (the
  kappa as the probability that the prediction is right), or an ``(n, classes)`` matrix against the labels.

``confidence`` is a kappa (higher = more confident); ``correct`` whether each prediction was right. AURC, E-AURC and
SAC depend only on the order of the confidences, so a kappa's ranking score serves; ECE, NLL and Brier need the
reported value, a probability in [0, 1].
"""

from __future__ import annotations

import math

import numpy as np

from harness.errors import HarnessError

ECE_BINS = 15
ECE_BINNING = "width"  # the companion paper's and Guo et al.'s (2017): comparable with their published numbers
SAC_TARGETS = (0.95, 0.99)
_EPS = float(np.finfo(np.float64).eps)  # log(0) guard of NLL, scikit-learn's


def _checked(confidence, correct) -> tuple[np.ndarray, np.ndarray]:
    confidence = np.asarray(confidence, dtype=np.float64).ravel()
    correct = np.asarray(correct).ravel()
    if confidence.size == 0:
        raise HarnessError("no ID samples")
    if not np.all(np.isfinite(confidence)):
        raise HarnessError(f"confidence contains {int(np.sum(~np.isfinite(confidence)))} NaN or infinite values")
    if correct.shape != confidence.shape:
        raise HarnessError(f"{correct.size} correctness flags for {confidence.size} confidences")
    if correct.dtype != bool and not np.all((correct == 0) | (correct == 1)):
        raise HarnessError("correctness flags must be booleans or 0/1")
    return confidence, correct.astype(bool)


def _probabilities(confidence) -> np.ndarray:
    if np.any(confidence < 0.0) or np.any(confidence > 1.0):
        raise HarnessError("confidence must be a probability in [0, 1] (a kappa whose outputs are probabilities)")
    return confidence


def _ties(confidence: np.ndarray, correct: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """In decreasing confidence: each tie's end (the number of samples at or above its confidence) and the number of
    errors among them."""
    order = np.argsort(-confidence, kind="stable")
    ordered = confidence[order]
    ends = np.r_[np.flatnonzero(ordered[1:] != ordered[:-1]) + 1, len(ordered)]
    return ends, np.cumsum(~correct[order])[ends - 1]


def risk_coverage(confidence, correct) -> tuple[np.ndarray, np.ndarray]:
    """The risk-coverage curve at each threshold (a distinct confidence, decreasing): the coverage (the share of
    samples kept, ``kappa >= t``) and the selective risk (the share of the kept samples that are wrong)."""
    confidence, correct = _checked(confidence, correct)
    ends, errors = _ties(confidence, correct)
    return ends / len(confidence), errors / ends


def aurc(confidence, correct) -> float:
    """Area under the risk-coverage curve: ``(1/n) sum_{i=1..n} E[errors among the i most confident] / i``, the
    expectation over the order of tied samples (linear inside a tie). Lower is better."""
    confidence, correct = _checked(confidence, correct)
    ends, errors = _ties(confidence, correct)
    kept = np.arange(1, len(confidence) + 1, dtype=np.float64)
    expected_errors = np.interp(kept, np.r_[0, ends], np.r_[0, errors])
    return math.fsum(expected_errors / kept) / len(kept)


def optimal_aurc(correct, discrete: bool = False) -> float:
    """The AURC of a kappa that ranks every correct prediction above every wrong one. By default the paper's
    ``r + (1 - r) ln(1 - r)`` (Geifman et al. 2018; ``r`` = the error rate), the integral of the ideal curve;
    ``discrete=True`` gives the finite-sample value ``(1/n) sum_{i > n_correct} (i - n_correct) / i``, which exceeds it
    by less than ``1 / (2 n_correct)``."""
    correct = np.asarray(correct).ravel().astype(bool)
    n, right = len(correct), int(correct.sum())
    if n == 0:
        raise HarnessError("no ID samples")
    if discrete:
        kept = np.arange(right + 1, n + 1, dtype=np.float64)
        return math.fsum((kept - right) / kept) / n
    risk = 1.0 - right / n
    return risk + (1.0 - risk) * math.log(1.0 - risk) if risk < 1.0 else 1.0


def e_aurc(confidence, correct) -> float:
    """Excess AURC, ``aurc - optimal_aurc`` (the paper's optimum): the part of the AURC due to the ranking, not to
    the accuracy."""
    return aurc(confidence, correct) - optimal_aurc(correct)


def coverage_at_accuracy(confidence, correct, target: float = 0.95) -> float:
    """SAC: the largest coverage at which the selective accuracy is at least ``target`` (0 when no threshold reaches
    it). Thresholds are the distinct confidences (``kappa >= t`` keeps a tie whole); accuracy is compared with a
    tolerance of 1e-9 samples, so that e.g. 19 of 20 meets 0.95 despite binary fractions."""
    if not 0.0 < target <= 1.0:
        raise HarnessError(f"a target accuracy lies in (0, 1], got {target}")
    confidence, correct = _checked(confidence, correct)
    ends, errors = _ties(confidence, correct)
    meets = (ends - errors) + 1e-9 >= target * ends
    return float(ends[meets].max() / len(confidence)) if meets.any() else 0.0


def ece(confidence, correct, bins: int = ECE_BINS, binning: str = ECE_BINNING) -> float:
    """Expected calibration error ``sum_b (n_b / n) |accuracy_b - mean confidence_b|`` (Naeini et al. 2015; Guo et al.
    2017). Bins are right-closed, ``(e_b, e_{b+1}]``, the first also holding its left edge:

    - ``"width"`` (default, the paper's): edges ``0, 1/bins, 2/bins, ..., 1`` (``k / bins`` rounded once).
    - ``"mass"``: edges at the confidences of rank ``ceil(k n / bins)`` (k = 1 .. bins-1, increasing order), so that
      without ties each bin holds ``n / bins`` samples, rounded; a tie stays in one bin (the result does not depend on
      the order of the samples), which may leave a bin larger and another empty.

    Empty bins count 0. ``confidence`` must be a probability.
    """
    confidence, correct = _checked(confidence, correct)
    confidence = _probabilities(confidence)
    if bins < 1:
        raise HarnessError(f"ECE needs at least one bin, got {bins}")
    if binning == "width":
        edges = np.arange(1, bins) / bins
    elif binning == "mass":
        n = len(confidence)
        edges = np.sort(confidence)[[-(-k * n // bins) - 1 for k in range(1, bins)]]
    else:
        raise HarnessError(f"ECE binning is 'width' or 'mass', got {binning!r}")
    which = np.searchsorted(edges, confidence, side="left")  # the number of edges below: (e_b, e_{b+1}] -> b
    order = np.argsort(which, kind="stable")
    gaps = np.split((correct - confidence)[order], np.flatnonzero(np.diff(which[order])) + 1)
    return math.fsum(abs(math.fsum(gap)) for gap in gaps) / len(confidence)  # exact sums: any sample order


def _target(probabilities, target) -> tuple[np.ndarray, np.ndarray]:
    """Probabilities of the observed outcome: 1-D ``p`` with correctness flags -> ``p`` or ``1 - p``; an ``(n, C)``
    matrix with integer labels -> the labels' column. Also returns the one-hot (or 0/1) targets."""
    p = np.asarray(probabilities, dtype=np.float64)
    if p.ndim == 1:
        p, flags = _checked(p, target)
        return _probabilities(p)[:, None], flags.astype(np.float64)[:, None]
    if p.ndim != 2 or p.shape[0] == 0:
        raise HarnessError(f"probabilities must be (n,) or (n, classes), got shape {p.shape}")
    labels = np.asarray(target).ravel()
    if labels.shape != (p.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise HarnessError(f"{labels.size} labels for {p.shape[0]} rows; labels must be integers")
    if labels.min() < 0 or labels.max() >= p.shape[1]:
        raise HarnessError(f"labels must lie in 0..{p.shape[1] - 1}")
    if not np.all(np.isfinite(p)) or np.any(p < 0.0) or np.any(p > 1.0):
        raise HarnessError("probabilities must be finite and in [0, 1]")
    if np.max(np.abs(p.sum(axis=1) - 1.0)) > 1e-6:
        raise HarnessError("each row of probabilities must sum to 1")
    onehot = np.zeros_like(p)
    onehot[np.arange(len(labels)), labels] = 1.0
    return p, onehot


def nll(probabilities, target) -> float:
    """Negative log-likelihood (natural log), probabilities clipped to ``[eps, 1 - eps]`` (float64 eps, as
    scikit-learn's ``log_loss``). 1-D: ``-mean(c log p + (1 - c) log(1 - p))`` with ``c`` = correct; ``(n, C)``:
    ``-mean(log p[label])``: the mean of :func:`nll_terms`."""
    terms = nll_terms(probabilities, target)
    return math.fsum(terms) / len(terms)


def nll_terms(probabilities, target) -> np.ndarray:
    """Each row's term of :func:`nll`: ``-log`` of the (clipped) probability of its observed outcome."""
    p, onehot = _target(probabilities, target)
    p = np.clip(p, _EPS, 1.0 - _EPS)
    if p.shape[1] == 1:
        return -(onehot[:, 0] * np.log(p[:, 0]) + (1.0 - onehot[:, 0]) * np.log1p(-p[:, 0]))
    return -np.log(p[onehot == 1.0])


def brier(probabilities, target) -> float:
    """Brier score, ``mean((p - c)^2)`` for 1-D probabilities against correctness, ``mean(sum_k (p_k - [k = y])^2)``
    for an ``(n, C)`` matrix against labels (the multi-class score, in [0, 2], not halved): the mean of
    :func:`brier_terms`."""
    terms = brier_terms(probabilities, target)
    return math.fsum(terms) / len(terms)


def brier_terms(probabilities, target) -> np.ndarray:
    """Each row's term of :func:`brier`: the squared gap summed over its classes (one for 1-D probabilities)."""
    p, onehot = _target(probabilities, target)
    return np.sum((p - onehot) ** 2, axis=1)


def selective_metrics(ranking, correct, confidence=None, targets=SAC_TARGETS) -> dict[str, float]:
    """The ID metrics of one kappa, keyed as a record would key them: ``aurc``, ``e_aurc`` and ``sac_<target %>`` from
    the ranking score; with ``confidence`` (the kappa's reported value, when it is a probability) also ``ece`` (equal
    width), ``ece_mass``, ``nll`` and ``brier`` of it against correctness."""
    out = {"aurc": aurc(ranking, correct), "e_aurc": e_aurc(ranking, correct)}
    for target in targets:
        out[f"sac_{target * 100:g}"] = coverage_at_accuracy(ranking, correct, target)
    if confidence is not None:
        out |= {
            "ece": ece(confidence, correct, binning="width"),
            "ece_mass": ece(confidence, correct, binning="mass"),
            "nll": nll(confidence, correct),
            "brier": brier(confidence, correct),
        }
    return out

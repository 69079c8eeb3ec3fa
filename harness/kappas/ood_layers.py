"""pytorch-ood's detectors that read the model beyond one pass's logits and features, fitted on the fit split.

``mahalanobis_odin`` fits on the kept features of the fit split (as ``mahalanobis``), then perturbs each input
through the model against that fit. ``multi_mahalanobis``, ``gram`` and ``nacue`` read intermediate layers named by
the ``layers`` parameter (module names, comma-separated; ``auto``: a timm model's ``feature_info``), captured by
forward hooks: a pass over the fit split in the model's process gives what each fit needs (spatially averaged layer
outputs, Gram statistics, NAC bin counts), the fit itself is pytorch-ood's and runs in the harness, and the fitted
state goes back to the model's process, where the evaluation splits are scored by pytorch-ood on the model.

Every implementation here is a :class:`~harness.kappas.base.FittedModelKappa` or, reading layers, a
:class:`~harness.kappas.base.LayersKappa`: its fit travels to the model's process by ``state()`` and ``load(state)``.
Perturbations (MahalanobisODIN's ``eps``) are in the model's normalised input space, as the harness's ODIN.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np
import torch
from pytorch_ood import detector as pod
from pytorch_ood.detector.nac import _LayerStats

from harness.errors import HarnessError
from harness.kappas.base import FittedModelKappa, LayersKappa
from harness.kappas.features import HOW_TO_EXPOSE, last_linear
from harness.kappas.model import logits_of, split_output


def _floats(value, count: int, name: str, kappa: str) -> list[float] | None:
    """A per-layer parameter (``None``, one number, or ``a,b,...``) as ``count`` floats, or None for the default."""
    if value is None:
        return None
    values = [float(v) for v in str(value).split(",")] if isinstance(value, str) else [float(value)]
    values = values * count if len(values) == 1 else values
    if len(values) != count:
        raise HarnessError(f"kappa '{kappa}': {name} gives {len(values)} values for {count} layers")
    return values


def _unwrapped(model: torch.nn.Module) -> torch.nn.Module:
    return getattr(model, "_orig_mod", model)  # torch.compile's wrapper


def named_layers(model: torch.nn.Module, spec: str, kappa: str) -> list[tuple[str, torch.nn.Module]]:
    """The modules ``spec`` names (``auto``: a timm model's ``feature_info``); an unknown name is one line."""
    model = _unwrapped(model)
    top = ", ".join(name for name, _ in model.named_children())
    if spec == "auto":
        info = getattr(model, "feature_info", None)
        names = (
            [i["module"] for i in info if "module" in i]
            if isinstance(info, list) and info and isinstance(info[0], dict)
            else []
        )
        if not names:
            raise HarnessError(
                f"kappa '{kappa}' reads intermediate layers and this model has no timm feature_info to "
                f"choose them: name them, {kappa}:layers=NAME[,NAME...] (its top-level modules: {top})"
            )
    else:
        names = [n.strip() for n in spec.split(",") if n.strip()]
    modules = dict(model.named_modules())
    missing = [n for n in names if n not in modules or not n]
    if missing or not names:
        raise HarnessError(
            f"kappa '{kappa}': the model has no layer '{missing[0] if missing else spec}' (its top-level "
            f"modules: {top})"
        )
    return [(n, modules[n]) for n in names]


@contextmanager
def captured(layers: list[torch.nn.Module]):
    """The outputs of ``layers`` on the passes inside the block, in call order (a list per pass's layers)."""
    outputs: list[torch.Tensor] = []
    hooks = [layer.register_forward_hook(lambda module, args, out: outputs.append(out)) for layer in layers]
    try:
        yield outputs
    finally:
        for hook in hooks:
            hook.remove()


def _channels_first(z: torch.Tensor) -> torch.Tensor:
    """A layer's output as pytorch-ood reads it: ``B x C x ...``; a timm token sequence ``B x N x D`` as
    ``B x D x N``."""
    return z.transpose(1, 2) if z.ndim == 3 else z


def layer_outputs(model: torch.nn.Module, layers: list[torch.nn.Module], images: torch.Tensor):
    """``(logits, [each layer's output, channels first])`` of one pass without gradients."""
    with torch.no_grad(), captured(layers) as outs:
        logits = logits_of(model(images)).float()
    if len(outs) != len(layers):
        raise HarnessError(f"the named layers gave {len(outs)} outputs on one pass, expected {len(layers)} (one each)")
    return logits, [_channels_first(z.float()) for z in outs]


def penultimate(model: torch.nn.Module):
    """``x -> the features`` feeding the model's last layer (the model's own, when it returns ``(logits, features)``),
    differentiable: MahalanobisODIN's encoder."""

    def encoder(x: torch.Tensor) -> torch.Tensor:
        inputs = {}
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        hooks = [m.register_forward_pre_hook(lambda module, args: inputs.__setitem__(module, args[0])) for m in linears]
        try:
            logits, features = split_output(model(x))
        finally:
            for hook in hooks:
                hook.remove()
        if features is None:
            layer = last_linear(model, logits.shape[1])
            if layer is None or layer not in inputs:
                raise HarnessError(
                    f"kappa 'mahalanobis_odin' needs features, but the model gives none: {HOW_TO_EXPOSE}"
                )
            features = inputs[layer]
        return features.reshape(len(features), -1).float()

    return encoder


def _tensors(value):
    if isinstance(value, np.ndarray):
        return torch.from_numpy(value)
    return [_tensors(v) for v in value] if isinstance(value, list) else value


def _arrays(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return [_arrays(v) for v in value] if isinstance(value, list) else value


def _to(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    return [_to(v, device) for v in value] if isinstance(value, list) else value


def _scores(outlier: torch.Tensor):
    scores = -outlier.detach().double()
    return scores, scores


class MahalanobisOdin(FittedModelKappa):
    """pytorch-ood's MahalanobisODIN: fitted on the kept features, scored on inputs perturbed through the model."""

    def __init__(self, params: dict):
        super().__init__(params)
        self.detector = pod.MahalanobisODIN(None, eps=params["eps"])

    def fit(self, outputs) -> None:
        self.detector.fit_features(
            torch.from_numpy(np.asarray(outputs.features, dtype=np.float32)),
            torch.from_numpy(np.asarray(outputs.labels, dtype=np.int64)),
        )

    def state(self) -> dict:
        return {"mu": _arrays(self.detector._base.mu), "precision": _arrays(self.detector._base.precision)}

    def load(self, state: dict) -> None:
        self.detector._base.mu, self.detector._base.precision = _tensors(state["mu"]), _tensors(state["precision"])

    def score_model(self, model, images, seed: int):
        base = self.detector._base
        base.mu, base.precision, base.encoder = (
            base.mu.to(images.device),
            base.precision.to(images.device),
            penultimate(model),
        )
        try:
            return _scores(self.detector.predict(images))
        finally:
            base.encoder = None


class MultiMahalanobis(LayersKappa):
    """pytorch-ood's MultiMahalanobis on the spatially averaged outputs of the named layers."""

    def __init__(self, params: dict):
        super().__init__(params)
        self.detector = None

    def _layers(self, model):
        return [m for _, m in named_layers(model, self.params["layers"], "multi_mahalanobis")]

    def extract(self, model, images) -> dict:
        _, outs = layer_outputs(model, self._layers(model), images)
        return {f"z{i}": z.reshape(len(z), z.shape[1], -1).mean(dim=2).cpu().numpy() for i, z in enumerate(outs)}

    def _detector(self, count: int):
        return pod.MultiMahalanobis(
            [torch.nn.Identity()] * count, _floats(self.params["alpha"], count, "alpha", "multi_mahalanobis")
        )

    def fit_extracted(self, parts: list[dict], labels: np.ndarray) -> None:
        zs = [torch.from_numpy(np.concatenate([p[f"z{i}"] for p in parts])) for i in range(len(parts[0]))]
        self.detector = self._detector(len(zs)).fit_structured(zs, torch.from_numpy(labels.astype(np.int64)))

    def state(self) -> dict:
        return {"mu": _arrays(self.detector.mu), "precision": _arrays(self.detector.precision)}

    def load(self, state: dict) -> None:
        self.detector = self._detector(len(state["mu"]))
        self.detector.mu, self.detector.precision = _tensors(state["mu"]), _tensors(state["precision"])

    def score_model(self, model, images, seed: int):
        _, outs = layer_outputs(model, self._layers(model), images)
        self.detector.mu, self.detector.precision = (
            _to(self.detector.mu, images.device),
            _to(self.detector.precision, images.device),
        )
        return _scores(self.detector.predict_structured(outs, device=images.device))


class _Statistics:
    """Gram statistics already computed, handed to pytorch-ood's ``Gram.fit`` in place of a batch of inputs."""

    def __init__(self, layers: list[dict[int, torch.Tensor]]):
        self.layers = layers

    def to(self, device):
        return self


class _GramOnStatistics(pod.Gram):
    """pytorch-ood's Gram fit (per-class bounds, held-out deviations) on Gram statistics computed beside the model."""

    def _create_feature_list(self, data: _Statistics):
        return None, data.layers

    @staticmethod
    def _gram_vector(feature: dict[int, torch.Tensor], p: int) -> torch.Tensor:
        return feature[p]


class Gram(LayersKappa):
    """pytorch-ood's Gram on the outputs of the named layers; the head is the rest of the model (its logits)."""

    def __init__(self, params: dict):
        super().__init__(params)
        self.detector = None

    def _layers(self, model):
        return [m for _, m in named_layers(model, self.params["layers"], "gram")]

    def _poles(self, count: int) -> list[int]:
        poles = self.params["num_poles_list"]
        if poles is None:
            return list(range(1, count + 1))
        try:
            return [int(p) for p in str(poles).split(",")]
        except ValueError as exc:
            raise HarnessError(f"kappa 'gram': num_poles_list takes integers a,b,..., got '{poles}'") from exc

    def extract(self, model, images) -> dict:
        logits, outs = layer_outputs(model, self._layers(model), images)
        return {
            "num_classes": np.array(logits.shape[1]),
            **{
                f"g{i}_{p}": pod.Gram._gram_vector(z, p).cpu().numpy()
                for i, z in enumerate(outs)
                for p in self._poles(len(outs))
            },
        }

    def fit_extracted(self, parts: list[dict], labels: np.ndarray) -> None:
        count = len({k.split("_")[0] for k in parts[0] if k.startswith("g")})
        poles = self._poles(count)
        layers = [
            {p: torch.from_numpy(np.concatenate([part[f"g{i}_{p}"] for part in parts])) for p in poles}
            for i in range(count)
        ]
        num_classes = int(parts[0]["num_classes"])
        self.detector = _GramOnStatistics(None, [None] * count, num_classes, poles)
        self.detector._device = torch.device("cpu")  # where the statistics are (pytorch-ood warns when it must guess)
        self.detector.fit([(_Statistics(layers), torch.from_numpy(labels.astype(np.int64)))])
        self.load(self.state())  # pytorch-ood's own Gram scores here too (the fitting subclass reads statistics)

    def state(self) -> dict:
        d = self.detector
        return {
            "num_classes": d.num_classes,
            "poles": list(d.num_poles_list),
            "min": _arrays(d.feature_min),
            "max": _arrays(d.feature_max),
            "norm": _arrays(d.layer_norm),
        }

    def load(self, state: dict) -> None:
        self.detector = pod.Gram(None, [None] * len(state["min"]), state["num_classes"], state["poles"])
        self.detector.feature_min, self.detector.feature_max = _tensors(state["min"]), _tensors(state["max"])
        self.detector.layer_norm = _tensors(state["norm"])

    def score_model(self, model, images, seed: int):
        logits, outs = layer_outputs(model, self._layers(model), images)
        return _scores(self.detector.predict_structured(logits, outs))


class _Logits(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return logits_of(self.model(x))


class Nacue(LayersKappa):
    """pytorch-ood's NACUE on the named layers: bin counts from its own ``fit`` per batch (counts add up), summed."""

    def __init__(self, params: dict):
        super().__init__(params)
        self.counts = None

    def _detector(self, model) -> pod.NACUE:
        layers = [m for _, m in named_layers(model, self.params["layers"], "nacue")]
        return pod.NACUE(
            _Logits(model),
            layers,
            m_bins=self.params["m_bins"],
            alpha=self.params["alpha"],
            o_star=self.params["o_star"],
        )

    def extract(self, model, images) -> dict:
        detector = self._detector(model).fit([images])
        return {f"counts{i}": s.counts.numpy() for i, s in enumerate(detector._stats)}

    def fit_extracted(self, parts: list[dict], labels: np.ndarray) -> None:
        self.counts = [sum(part[f"counts{i}"] for part in parts) for i in range(len(parts[0]))]

    def state(self) -> dict:
        return {"counts": self.counts}

    def load(self, state: dict) -> None:
        self.counts = state["counts"]

    def score_model(self, model, images, seed: int):
        detector = self._detector(model)
        detector._stats = [
            _LayerStats(m=m, o_star=o, counts=torch.from_numpy(c))
            for m, o, c in zip(detector.m_bins, detector.o_star, self.counts)
        ]
        detector._fitted = True
        return _scores(detector.predict(images))

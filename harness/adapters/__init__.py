"""Model adapters: turn a target string into a :class:`~harness.submission.Submission`.

Targets (weights come from a local file or folder; a ``timm:`` or ``open_clip:`` target given none and an ``hf:`` Hub
repo download pretrained weights, pinned to a commit, through :mod:`harness.adapters.hub_weights`, and a
``torchvision:`` target given none its weights entry's through torch.hub's cache):

- ``timm:<name>`` (``<name>`` may carry a pretrained tag, e.g. ``resnet50.tv_in1k``, which selects that tag's
  preprocessing; or ``hf-hub:<owner>/<repo>``, a repo saved by timm) with ``weights`` a ``.safetensors`` / ``.pt`` /
  ``.pth`` / ``.bin`` state dict, or without one timm's pretrained weights (``pretrained=True``) fetched from the
  Hugging Face Hub through its cache at the commit ``revision`` names (:mod:`harness.adapters.hub_weights`);
  preprocessing is ``timm.data.resolve_data_config`` of the model.
- ``torchvision:<name>[@<ENTRY>]`` with a weights file, or without one the weights of its weights entry (``ENTRY``,
  else ``DEFAULT``) through torch.hub's cache; preprocessing is the torchvision weights entry's transform (``ENTRY``;
  else the entry whose file hash the weights file carries, else the name's ``DEFAULT`` entry).
- ``open_clip:<arch>[/<tag>]`` with a weights file (or without one the tag's Hub weights, loaded by open_clip): the
  paper's zero-shot classifier (docs/method.md section 5) over CLIP's curated ImageNet-1K class names unless
  ``classnames`` is given; preprocessing is open_clip's for the tag.
- ``hf:<folder>``: a Hugging Face ``transformers`` image classifier saved with ``save_pretrained``, with its
  ``AutoImageProcessor`` preprocessing; ``hf:<owner>/<repo>`` (no such folder) the same from a Hub model repo, pinned
  to the commit ``revision`` names.
- anything else: a submission file (:func:`harness.submission.load_file`).

Each zoo kind is an entry point naming its adapter function (:mod:`harness.zoo`): a new kind is a module with a
function ``ZooTarget -> Submission`` and one line in ``pyproject.toml`` (read from the installed metadata, so
reinstall after adding it). Weights load safely: safetensors, or ``torch.load(weights_only=True)``. No code from a
model repo runs: transformers loads with ``trust_remote_code=False``, a configuration that names code of its own is
refused, and stdin is closed while a target builds; a configuration read from a repo or folder is checked before any
model is built (:mod:`harness.adapters.configs`).
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.adapters.common import ZooTarget, stdin_closed
from harness.adapters.hf_models import LogitsOf, hf_target
from harness.adapters.open_clip_models import (
    CLIP_TEMPLATES,
    ZeroShotClassifier,
    open_clip_options,
    open_clip_target,
    zero_shot_head,
)
from harness.adapters.timm_models import timm_target
from harness.adapters.torchvision_models import torchvision_target, torchvision_weights_entry
from harness.adapters.weights import TORCH_SUFFIXES, ClassCountMismatch, copy_state_in_order, load_weights, read_weights
from harness.errors import HarnessError
from harness.options import check_target
from harness.submission import ClassSubset, Submission, check_output, load_file
from harness.zoo import zoo_kind

__all__ = [
    "CLIP_TEMPLATES",
    "ClassCountMismatch",
    "LogitsOf",
    "TORCH_SUFFIXES",
    "ZeroShotClassifier",
    "ZooTarget",
    "copy_state_in_order",
    "hf_target",
    "load_target",
    "load_weights",
    "open_clip_options",
    "open_clip_target",
    "read_weights",
    "timm_target",
    "torchvision_target",
    "torchvision_weights_entry",
    "zero_shot_head",
]


def load_target(
    target: str,
    *,
    weights: str | None = None,
    num_classes_expected: int | None = None,
    classnames: Sequence[str] | None = None,
    revision: str | None = None,
    subset: ClassSubset | None = None,
) -> Submission:
    """The submission for ``target`` (see the module docstring); with ``num_classes_expected`` its logits' width is
    checked: a model of ``subset.total`` outputs (the ID classes' label space) is restricted to the ID classes'
    columns (:func:`harness.submission.check_output`).

    ``classnames`` (open_clip only) are the ID class names in benchmark order for the zero-shot head; ``revision``
    (timm and open_clip without ``weights``, an hf Hub repo) the Hub revision its pretrained weights are fetched at.
    """
    check_target(target, weights, revision)
    kind = zoo_kind(target)
    if kind is None:
        submission = load_file(target)
    else:
        try:
            build = kind.adapter.load()
        except (ImportError, AttributeError) as exc:  # a third party's entry point: one line naming it
            raise HarnessError(
                f"zoo kind '{kind.name}' ({kind.adapter.value}) failed to load: {type(exc).__name__}: {exc}"
            ) from exc
        name = str(target).partition(":")[2]
        with stdin_closed():  # no library prompt can be answered (nor shown): a repo's own code never runs
            try:
                submission = build(ZooTarget(name, weights, num_classes_expected, classnames, revision))
            except ClassCountMismatch as exc:
                if subset is None or exc.model_classes != subset.total:
                    raise exc.with_subset(subset) from None
                submission = build(ZooTarget(name, weights, subset.total, classnames, revision))
    if num_classes_expected is not None:
        check_output(submission, num_classes_expected, subset)
    return submission

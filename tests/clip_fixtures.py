"""A tiny open_clip model with random weights, registered from a config and loaded as an open_clip: target (offline)."""

import json
from pathlib import Path

import torch

CONFIG = {
    "embed_dim": 16,
    "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "patch_size": 16, "head_width": 16},
    "text_cfg": {"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
}


def tiny_open_clip(folder: Path, classnames: list[str]):
    """``(the CLIP model, the open_clip:cood-tiny-clip submission over classnames)``; weights seeded, saved in
    folder."""
    import open_clip

    from harness.adapters import load_target

    (folder / "cfg").mkdir(parents=True, exist_ok=True)
    (folder / "cfg" / "cood-tiny-clip.json").write_text(json.dumps(CONFIG))
    open_clip.add_model_config(folder / "cfg")
    torch.manual_seed(0)
    clip = open_clip.create_model("cood-tiny-clip", pretrained=None).eval()
    torch.save(clip.state_dict(), folder / "clip.pt")
    submission = load_target(
        "open_clip:cood-tiny-clip",
        weights=str(folder / "clip.pt"),
        num_classes_expected=len(classnames),
        classnames=classnames,
    )
    return clip, submission

"""The sandboxed child's service (:mod:`harness.runtime.child`): load the submission, then answer batches until told
to exit.

It sends only data: the file's declared configuration, its kappas' parameters, the model's parameter bytes (which
the harness hashes itself) and, per batch, logits, features and the in-model kappas' values.
"""

from __future__ import annotations

import torch

from harness.errors import HarnessError, detail
from harness.runtime.channel import Channel
from harness.runtime.execution import Execution
from harness.submission import raw_bytes


def state_entries(model: torch.nn.Module) -> list[dict]:
    """The model's state dict as the harness hashes it: name, dtype, shape and raw bytes of each tensor."""
    return [
        {"name": name, "dtype": str(tensor.dtype), "shape": list(tensor.shape), "bytes": raw_bytes(tensor)}
        for name, tensor in sorted(model.state_dict().items())
    ]


def as_numpy(tree):
    """Tensors of a kappa's state or extraction as numpy arrays."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu().numpy()
    if isinstance(tree, dict):
        return {k: as_numpy(v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [as_numpy(v) for v in tree]
    return tree


def error_body(exc: HarnessError) -> dict:
    """An error as the harness is told it: its line, and the whole text of its cause where it has one."""
    whole = detail(exc)
    return {"message": str(exc)} if whole is None else {"message": str(exc), "detail": whole}


def load(options: dict):
    """The submission and its forward pass, checked by a trial pass on a blank input; and what the harness is told."""
    from harness.runtime.inference import LocalForward
    from harness.submission import ClassSubset, fit_to_classes, load_file

    torch.set_num_threads(options["threads"])
    submission = load_file(options["path"], sandboxed=True)
    if submission.preprocessing["transform"] == "custom":
        raise HarnessError(
            f"submission {submission.source} defines transform(), which would run outside the sandbox; "
            "declare DATA_CONFIG instead, or pass --trust-submission to run the file in the harness's process"
        )
    told = options["subset"]  # the ID classes as a subset of the label space they were drawn from, or None
    offered = told and ClassSubset(told["source"], told["total"], tuple(told["columns"]))
    image, num_classes = torch.zeros(submission.preprocessing["input_size"]), options["num_classes"]
    restricted = fit_to_classes(submission.model, image, num_classes, offered, options["path"])
    execution = Execution(torch.device(options["device"]), options["amp"], options["channels_last"], options["compile"])
    model = execution.prepare(submission.model if restricted is None else restricted)
    forward = LocalForward(model, execution, num_classes, None if restricted is None else offered)
    meta = {
        "name": submission.name,
        "data_config": {k: v for k, v in submission.preprocessing.items() if k != "transform"},
        "kappas": {
            n: {"params": k.params, "wants_features": k.wants_features, "probability": k.probability}
            for n, k in submission.user_kappas.items()
        },
        "head": None if forward.head is None else list(forward.head),
        "state": state_entries(submission.model),
        "parameters": [name for name, _ in submission.model.named_parameters()],
        "subset": restricted is not None,
    }
    return submission, forward, meta


def serve(channel: Channel) -> None:
    """Answer the harness: ``load`` first, then ``batch``, ``extract`` and ``states`` until ``exit``."""
    from harness.kappas import rebuild_kappa

    kind, options = channel.receive()
    try:
        submission, forward, meta = load(options)
    except HarnessError as exc:
        return channel.send("error", error_body(exc))
    except MemoryError:
        return channel.send(
            "error",
            {"message": f"the submission ran out of memory while loading (limit {options['memory_bytes']} bytes)"},
        )
    channel.send("loaded", meta)
    states = {}  # fitted kappas' state, by name, from the harness

    def rebuilt(wanted):
        kappas = []
        for name, params in wanted:
            kappa = rebuild_kappa(name, params, submission.user_kappas)
            if name in states:
                kappa.impl.load(states[name])
            kappas.append(kappa)
        return kappas

    while True:
        try:
            kind, body = channel.receive()
        except EOFError:
            return
        if kind == "exit":
            return
        try:
            if kind == "states":
                states.update(body)
                channel.send("ok")
            elif kind == "extract":
                images = torch.from_numpy(body["images"])
                channel.send("extracted", as_numpy(forward.extract(images, rebuilt(body["kappas"]))))
            else:
                out = forward(torch.from_numpy(body["images"]), body["seeds"], rebuilt(body["kappas"]))
                channel.send(
                    "answer", {"logits": out.logits, "features": out.features, "scores": out.scores, "confs": out.confs}
                )
        except torch.cuda.OutOfMemoryError as exc:
            channel.send("oom", {"message": str(exc).splitlines()[0]})
        except HarnessError as exc:
            channel.send("error", error_body(exc))
        except MemoryError:
            channel.send(
                "error", {"message": f"the submission ran out of memory (limit {options['memory_bytes']} bytes)"}
            )

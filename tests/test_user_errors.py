"""Errors about a submission in the user's words: the path they named (never the sandbox's mount point), the line of
their code, and PyTorch's many-line messages in one line, shared with the library targets' own wording."""

from pathlib import Path

import pytest
import torch

from harness.errors import HarnessError, cause, unfit_weights
from harness.runtime.sandbox import in_user_words
from harness.submission import load_file


def load_error(module: torch.nn.Module, state: dict) -> RuntimeError:
    """PyTorch's own error for loading ``state`` into ``module``."""
    with pytest.raises(RuntimeError) as caught:
        module.load_state_dict(state)
    return caught.value


def test_pytorch_state_dict_errors_are_one_line():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    deeper = torch.nn.Sequential(torch.nn.Linear(4, 2), torch.nn.ReLU(), torch.nn.Linear(2, 3))
    error = load_error(model, deeper.state_dict())
    assert str(error).startswith("Error(s) in loading state_dict for Sequential:\n\tMissing key(s)")
    assert cause(error) == (
        "the weights do not fit Sequential: 2 missing keys ('1.bias' and 1 more), "
        "4 unexpected keys ('0.bias' and 3 more)"
    )
    wider = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 5))
    assert cause(load_error(model, wider.state_dict())) == (
        "the weights do not fit Sequential: '1.weight' is (5, 4), the model's is (3, 4) and 1 more"
    )
    assert unfit_weights(["a"], [], [("b", (1,), (2,))]) == "1 missing key ('a'), 'b' is (1,), the model's is (2,)"
    assert cause(ValueError("first\n\n  second\nthird")) == (
        "ValueError: first (and 2 more lines: COOD_DEBUG=1 shows them)"
    )


def test_a_failure_names_the_users_file_and_line(tmp_path):
    (tmp_path / "helpers.py").write_text("def build():\n    return undefined_name\n")
    (tmp_path / "model.py").write_text("from helpers import build\n\nMODEL = build()\n")
    with pytest.raises(HarnessError) as caught:
        load_file(tmp_path / "model.py")
    assert str(caught.value) == (
        f"cannot load submission {tmp_path / 'model.py'} ({tmp_path / 'helpers.py'}, line 2): "
        "NameError: name 'undefined_name' is not defined"
    )
    (tmp_path / "model.py").write_text("DATA_CONFIG = {'input_size': (1, 8, 8)}\n\ndef build_model():\n    1 / 0\n")
    with pytest.raises(HarnessError) as caught:
        load_file(tmp_path / "model.py")
    assert str(caught.value) == (
        f"submission {tmp_path / 'model.py'}, line 4: building the model failed: ZeroDivisionError: division by zero"
    )


def test_the_mount_point_is_told_as_the_users_folder():
    line = "cannot load submission /submission/m.py, line 3: OSError: /submission/w.bin not in /submission"
    assert in_user_words(line, Path("sub")) == "cannot load submission sub/m.py, line 3: OSError: sub/w.bin not in sub"
    assert in_user_words('File "/submission/m.py", line 3', Path(".")) == 'File "m.py", line 3'
    assert in_user_words("in /submission/m.py", Path("/home/me/my model/")) == "in /home/me/my model/m.py"
    other = 'File "/venv/harness/submission.py", /submissions/x, ~/submission/y, /submission.py'
    assert in_user_words(other, Path("sub")) == other

"""`--model /dev/null` was called "a folder" (review-ao M7): a device is not a regular file."""

from __future__ import annotations

from pathlib import Path

import pytest

from spotwise.errors import SpecError
from spotwise.predictors.service import load_model_file


def test_a_device_is_not_called_a_folder(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_model_file("/dev/null")
    assert info.value.message == "--model /dev/null: not a regular file, not a model file"
    with pytest.raises(SpecError) as info:
        load_model_file(tmp_path)
    assert info.value.message == f"--model {tmp_path}: a folder, not a model file"

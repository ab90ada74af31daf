"""The secret warning sees the common forms of a secret in ``env``, ``setup`` and ``command``
(review-at AT3): a token as a URL's user, a signed URL, an Authorization header's value, a
well-known token, ``export HF_TOKEN=...`` and ``--token ...``. Warned (never refused), naming
the field and never the value; the shipped examples and README's spec give no warning."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from spotwise.planner.preflight import secret_env_warnings
from spotwise.spec import JobSpec, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "ghp_" + "A1b2C3d4E5" * 4  # GitHub's shape, 44 characters
AWS = [{"name": "aws", "regions": ["us-east-1"], "options": {"image": "ami-12c6146b"}}]


def _spec(setup: str = "", **changes: Any) -> JobSpec:
    options = {"image": "ami-12c6146b", **({"setup": setup} if setup else {})}
    data: dict[str, Any] = {
        "name": "hygiene",
        "command": ["python", "train.py"],
        "metric": {"name": "score"},
        "steps": 2,
        "search_space": {"lr": {"type": "real", "low": 0.01, "high": 0.1}},
        "providers": [{"name": "aws", "regions": ["us-east-1"], "options": options}],
        "checkpoint": {"location": "s3://spotwise-bucket/ckpt"},
    }
    data.update(changes)
    return parse_spec(data)


SECRET_VALUES = {
    "REPO_URL": (f"https://{TOKEN}@github.com/o/r.git", "a URL with a token as its user"),
    "SIGNED": (
        "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIAX%2F&X-Amz-Signature=f00d",
        "a signed URL",
    ),
    "GCS_SIGNED": ("https://storage.googleapis.com/b/o?X-Goog-Signature=f00d", "a signed URL"),
    "AZ_SAS": ("https://a.blob.core.windows.net/c/b?sv=2024&sig=f00dSECRET", "a signed URL"),
    "AUTH_HEADER": ("Bearer eyJhbGciOiJIUzI1NiJ9", "an Authorization header's value"),
    "SLACK_URL": ("https://hooks.slack.com/services/T0/B0/XXXXSECRET", "a token"),
    "EXTRA": (f"--depth 1 {TOKEN}", "a token"),
}


def test_env_values_that_hold_a_secret_are_warned_about_by_key() -> None:
    lines = secret_env_warnings(_spec(env={k: v for k, (v, _) in SECRET_VALUES.items()}))
    assert [line.split("'")[1] for line in lines] == [f"env.{k}" for k in sorted(SECRET_VALUES)]
    for line in lines:
        key = line.split("'")[1][4:]
        value, what = SECRET_VALUES[key]
        assert f"'env.{key}' holds {what}" in line
        assert value not in line and "SECRET" not in line and "f00d" not in line
        assert "user-data/metadata" in line


@pytest.mark.parametrize(
    ("setup", "what"),
    [
        (f"git clone https://{TOKEN}@github.com/o/r.git", "holds a URL with a token as its user"),
        ("export HF_TOKEN=hf_abc123 && pip install -e .", "sets HF_TOKEN to a value written in it"),
        ("huggingface-cli login --token abc123", "passes --token a value written in it"),
        ("curl -H 'Authorization: Bearer abcdefgh1234' https://x", "holds an Authorization"),
        ("WANDB_API_KEY='k123' wandb login", "sets WANDB_API_KEY to a value written in it"),
    ],
)
def test_an_aws_setup_holding_a_secret_is_warned_about(setup: str, what: str) -> None:
    (line,) = secret_env_warnings(_spec(setup=setup))
    assert line.startswith(f"warning: spec field 'providers.0.options.setup' {what}")
    assert "abc123" not in line and TOKEN not in line and "k123" not in line


@pytest.mark.parametrize(
    "command",
    [
        ["python", "t.py", "--token", "hf_abc123"],
        ["python", "t.py", "--api-key=abc123"],
        ["python", "t.py", "--repo", f"https://{TOKEN}@github.com/o/r.git"],
        ["python", "t.py", "db.password=abc123"],
    ],
)
def test_a_command_holding_a_secret_is_warned_about(command: list[str]) -> None:
    (line,) = secret_env_warnings(_spec(command=command))
    assert line.startswith("warning: spec field 'command' ")
    assert "abc123" not in line and TOKEN not in line


def test_look_alikes_and_secrets_taken_from_elsewhere_are_not_warned_about() -> None:
    spec = _spec(
        setup=(
            "export HF_TOKEN=$(aws secretsmanager get-secret-value --secret-id hf "
            '--query SecretString --output text) && export WANDB_API_KEY="$WANDB_KEY" && '
            "git clone https://github.com/o/r.git && pip install -e r"
        ),
        command=[
            *("python", "train.py", "--max-tokens", "512", "--tokenizer", "gpt2"),
            *("--token-file", "/run/secrets/hf", "--basic", "settings", "--lr={lr}"),
        ],
        env={
            "DATA_URL": "https://example.com/data.csv?version=2",
            "GIT_REMOTE": "ssh://git@github.com/me/repo",
            "MODE": "bearer of news",
            "HF_HOME": "/data/hf",
        },
    )
    assert secret_env_warnings(spec) == []


def test_the_shipped_examples_and_the_readme_spec_give_no_warning() -> None:
    examples = sorted((ROOT / "examples").glob("*/job.yaml"))
    assert examples
    for path in examples:
        assert secret_env_warnings(load_spec(path)) == [], path
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    specs = [yaml.safe_load(b) for b in blocks]
    specs = [d for d in specs if isinstance(d, dict) and "command" in d and "search_space" in d]
    assert specs
    for data in specs:
        assert secret_env_warnings(parse_spec(data)) == []
        on_aws = {**data, "providers": AWS, "checkpoint": {"location": "s3://spotwise-bucket/ckpt"}}
        assert secret_env_warnings(parse_spec(on_aws)) == []

"""The secret warning names a credential, not an ordinary training flag (review-av F4).

In a ``command`` or a ``setup`` (``--flag value``, ``NAME=value``, a Hydra override) only a name
that names a credential itself warns (a bare ``token``, a password or secret, an
auth/access/bearer/refresh or a service's token, an api/access/secret/private key), not any
``*_token``/``*_key`` (tokenizer tokens, sort/metric/monitor/cache keys); ``basic`` only as an
Authorization header's value; ``sk-`` only in a real key's shape. The ``env`` name rule is as
it was."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from spotwise.planner.preflight import secret_env_warnings, secret_in_text
from spotwise.spec import JobSpec, parse_spec


def _spec(command: list[str], setup: str = "", env: dict[str, str] | None = None) -> JobSpec:
    options = {"image": "ami-12c6146b", **({"setup": setup} if setup else {})}
    data: dict[str, Any] = {
        "name": "precise",
        "command": command,
        "metric": {"name": "score"},
        "steps": 2,
        "search_space": {"lr": {"type": "real", "low": 0.01, "high": 0.1}},
        "providers": [{"name": "aws", "regions": ["us-east-1"], "options": options}],
        "checkpoint": {"location": "s3://spotwise-bucket/ckpt"},
        "env": env or {},
    }
    return parse_spec(data)


# every false positive review-av F4 found: each warned before
FALSE_POSITIVES = [
    "python train.py --pad_token 0",
    "python train.py --pad-token 0 --eos_token 2",
    "python train.py --mask-token [MASK]",
    "python train.py --max_token 4",
    "python train.py --sort-key val_loss",
    "python train.py --key resnet50",
    "python train.py --monitor_key accuracy",
    "python train.py --metric-key score --pass 2",
    "python train.py --checkpoint-key latest",
    "python train.py --cache_key abc",
    "python train.py --primary-key id",
    "python train.py trainer.max_steps=100 data.sort_key=length",
    "python train.py --secret-sauce 3",
    "python train.py --augment basic /data/imagenet/train",
    "python train.py --model sk-learn-style-baseline-model-v2",
    "python train.py --use_auth_token True",
]


@pytest.mark.parametrize("command", FALSE_POSITIVES)
def test_ordinary_flags_named_like_a_token_or_a_key_give_no_warning(command: str) -> None:
    assert secret_in_text(command) == ""
    assert secret_env_warnings(_spec(command.split())) == []


REALISTIC = {
    "hf_trainer": (
        "python run_glue.py --model_name_or_path bert-base-cased --task_name mrpc --do_train "
        "--do_eval --max_seq_length 128 --per_device_train_batch_size 32 --learning_rate {lr} "
        "--num_train_epochs 3 --output_dir /tmp/mrpc --overwrite_output_dir "
        "--evaluation_strategy epoch --metric_for_best_model accuracy --load_best_model_at_end "
        "--report_to wandb --run_name sweep --hub_model_id me/bert-mrpc --push_to_hub "
        "--use_auth_token true --pad_to_max_length --remove_unused_columns False"
    ),
    "tokenizer": (
        "python train_tokenizer.py --vocab_size 32000 --pad_token <pad> --bos_token <s> "
        "--eos_token </s> --unk_token <unk> --mask_token [MASK] --cls_token [CLS] "
        "--sep_token [SEP] --pad-token-id 0 --max-tokens 4096 --num_tokens 512"
    ),
    "torchrun": (
        "torchrun --nnodes 2 --nproc_per_node 8 --rdzv_id 5 --rdzv_backend c10d "
        "--rdzv_endpoint head:29400 --master_port 29500 train.py --config cfg.yaml "
        "--resume-key latest --sort-key val_loss"
    ),
    "hydra": (
        "python train.py experiment=base data.sort_key=length model.tokenizer.pad_token=<pad> "
        "trainer.max_steps=1000 +trainer.precision=bf16 ++model.cache_key=v2 "
        "hydra.run.dir=/outputs/run callbacks.checkpoint.monitor=val/loss "
        "callbacks.checkpoint.metric_key=val_acc logger.wandb.project=sweep key=resnet50"
    ),
    "lightning": (
        "python main.py fit --config cfg.yaml --trainer.max_epochs 10 "
        "--trainer.callbacks.monitor val_loss --model.learning_rate {lr} --data.batch_size 64 "
        "--ckpt_path last --trainer.logger.init_args.project x --seed_everything 42 "
        "--model.monitor_key accuracy --data.tokenizer.pad_token 0"
    ),
    "fairseq": (
        "fairseq-train data-bin/wmt16 --arch transformer_wmt_en_de --optimizer adam --lr 5e-4 "
        "--max-tokens 4096 --tokens-per-sample 512 --criterion label_smoothed_cross_entropy "
        "--label-smoothing 0.1 --best-checkpoint-metric bleu --maximize-best-checkpoint-metric "
        "--bpe sentencepiece --sentencepiece-model spm.model --save-dir /ckpt --mask-whole-words "
        "--checkpoint-suffix -v2 --keep-last-epochs 2"
    ),
    "timm": (
        "python train.py /data/imagenet --model resnet50 --aa rand-m9-mstd0.5 --sched cosine "
        "--epochs 100 --batch-size 256 --amp --augment basic /data/imagenet/train "
        "--tokenizer basic --data-dir datasets/cifar10train --experiment sk-resnet50-baseline-v2"
    ),
    "accelerate": (
        "accelerate launch --num_processes 8 --mixed_precision bf16 train.py "
        "--gradient_accumulation_steps 4 --with_tracking --report_to wandb "
        "--deepspeed ds_config.json --api-key-file /run/secrets/key --token-file ~/.hf"
    ),
}


@pytest.mark.parametrize("name", sorted(REALISTIC))
def test_realistic_training_commands_give_no_warning(name: str) -> None:
    command = REALISTIC[name].split()
    assert secret_env_warnings(_spec(command)) == [], name


def test_an_ordinary_setup_gives_no_warning() -> None:
    setup = (
        "pip install -r requirements.txt && export TOKENIZERS_PARALLELISM=false PAD_TOKEN=0 "
        "SORT_KEY=length && python prep.py --sort-key length --key train && "
        "git clone https://github.com/o/r.git"
    )
    assert secret_env_warnings(_spec(["python", "train.py"], setup=setup)) == []


KEY = "sk-" + "A1b2C3d4" * 6  # an OpenAI key's shape: sk- and 48 letters and digits
BASIC = base64.b64encode(b"alice:hunter2-secret").decode()  # 28 characters, '=' padded
TRUE_POSITIVES = [
    ("--hub_token hf_abc123", "passes --hub_token"),
    ("--token abc123", "passes --token"),
    ("--hf-token abc123", "passes --hf-token"),
    ("--github_token abc123", "passes --github_token"),
    ("--wandb-key abc123", "passes --wandb-key"),
    ("--openai-api-key abc123", "passes --openai-api-key"),
    ("--apiKey abc123", "passes --apiKey"),
    ("--password abc123", "passes --password"),
    ("--db-passwd abc123", "passes --db-passwd"),
    ("--client-secret abc123", "passes --client-secret"),
    ("--secret abc123", "passes --secret"),
    ("--secret-key abc123", "passes --secret-key"),
    ("--private_key abc123", "passes --private_key"),
    ("--access-key abc123", "passes --access-key"),
    ("--auth-token abc123", "passes --auth-token"),
    ("--access_token abc123", "passes --access_token"),
    ("--bearer-token abc123", "passes --bearer-token"),
    ("--refresh_token abc123", "passes --refresh_token"),
    ("--model.api_key=abc123", "passes --model.api_key"),
    ("--push_to_hub --hub_token abc123", "passes --hub_token"),  # a switch before it hid it
    ("db.password=abc123", "sets db.password"),
    ("+logger.wandb.api_key=abc123", "sets logger.wandb.api_key"),
    ("--header Authorization:Basic YWJj", "holds an Authorization header's value"),
    (f"--auth basic {BASIC}", "holds an Authorization header's value"),
    (f"--model {KEY}", "holds a token"),
    ("--llm sk-proj-" + "Ab1_" * 8, "holds a token"),
    ("--judge sk-ant-api03-" + "Ab1-" * 8, "holds a token"),
]


@pytest.mark.parametrize(("args", "what"), TRUE_POSITIVES)
def test_a_credential_in_a_command_still_warns(args: str, what: str) -> None:
    (line,) = secret_env_warnings(_spec(["python", "train.py", *args.split()]))
    assert line.startswith(f"warning: spec field 'command' {what}"), line
    for secret in ("abc123", KEY, BASIC, "YWJj", "Ab1"):
        assert secret not in line


@pytest.mark.parametrize(
    ("setup", "what"),
    [
        (
            "curl -H 'Authorization: Basic dXNlcjpwYXNz' https://x",
            "holds an Authorization header's value",
        ),
        ("export OPENAI_API_KEY=abc123 HF_HUB_TOKEN=abc123", "sets OPENAI_API_KEY"),
        ("AWS_SECRET_ACCESS_KEY=abc123 aws s3 ls", "sets AWS_SECRET_ACCESS_KEY"),
        (
            "export CONN='DefaultEndpointsProtocol=https;AccountName=a;AccountKey=abc123=='",
            "sets AccountKey",
        ),
    ],
)
def test_a_credential_in_a_setup_still_warns(setup: str, what: str) -> None:
    (line,) = secret_env_warnings(_spec(["python", "train.py"], setup=setup))
    assert line.startswith(f"warning: spec field 'providers.0.options.setup' {what}"), line
    assert "abc123" not in line and "dXNlcjpwYXNz" not in line


def test_env_names_keep_their_rule_and_env_values_the_precise_one() -> None:
    env = {"HF_TOKEN": "abc123", "TRAIN_ARGS": "--pad_token 0 --sort-key val_loss", "X": KEY}
    lines = secret_env_warnings(_spec(["python", "train.py"], env=env))
    assert [line.split("' ")[0] for line in lines] == [
        "warning: spec field 'env.HF_TOKEN",
        "warning: spec field 'env.X",
    ]
    assert "looks like a secret" in lines[0] and "holds a token" in lines[1]

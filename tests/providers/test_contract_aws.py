"""The provider contract over AWS on moto: real spot prices and a Pricing API injected, the EC2
instance emulator running each launched instance's agent (so notices travel the real path:
IMDS → agent → S3 → provisioner), and a real untagged instance as the foreign id."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from contract import CatalogAndProvisioner, ProviderContract

from spotwise.providers.aws import open_catalog, open_provisioner
from spotwise.providers.registry import ProviderConfig

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class TestAwsContract(ProviderContract):
    @pytest.fixture
    def provider(
        self, spot_prices: Any, pricing_api: Any, bucket: str, emulator: Any
    ) -> CatalogAndProvisioner:
        config = ProviderConfig(
            name="aws",
            regions=("us-east-1",),
            options={"image": "ami-12c6146b", "artifacts": f"s3://{bucket}/runs", "poll_s": "0"},
        )
        return open_catalog(config), open_provisioner(config)

    @pytest.fixture
    def region(self) -> str:
        return "us-east-1"

    @pytest.fixture
    def launch_argv(self) -> tuple[str, ...]:
        return (sys.executable, "-c", "import time; time.sleep(60)")

    @pytest.fixture
    def foreign_instance_id(self, aws_env: str) -> str:
        import boto3

        ec2 = boto3.client("ec2", region_name="us-east-1")
        resp = ec2.run_instances(
            ImageId="ami-12c6146b",
            InstanceType="t3.micro",
            MinCount=1,
            MaxCount=1,
            TagSpecifications=[
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": "spotwise:job", "Value": "not-really"}],
                }
            ],
        )
        return str(resp["Instances"][0]["InstanceId"])

    @pytest.fixture
    def inject_notice(self, emulator: Any) -> Callable[[str], None]:
        def inject(instance_id: str) -> None:
            emulator.interrupt(instance_id, lead_s=30.0)

        return inject

    @pytest.fixture
    def settle_s(self) -> float:
        return 30.0


def test_the_foreign_instance_survives_a_refused_terminate(
    aws_env: str, bucket: str, tmp_path: Path
) -> None:
    """Beyond the contract: the untagged instance is still running after the refusal."""
    import boto3

    from spotwise.errors import ProviderError

    ec2 = boto3.client("ec2", region_name="us-east-1")
    iid = ec2.run_instances(
        ImageId="ami-12c6146b", InstanceType="t3.micro", MinCount=1, MaxCount=1
    )["Instances"][0]["InstanceId"]
    prov = open_provisioner(ProviderConfig(name="aws", regions=("us-east-1",)))
    with pytest.raises(ProviderError, match="refusing to terminate"):
        prov.terminate([iid])
    state = ec2.describe_instances(InstanceIds=[iid])["Reservations"][0]["Instances"][0]["State"]
    assert state["Name"] in ("pending", "running")

"""Placeholder and literal-id handling for the ParallelCluster checks (pure Python, no pcluster needed)."""
from __future__ import annotations

from clusterkit.pcluster.tokens import (
    find_tokens,
    is_id_like,
    placeholder_kind,
    pseudo_value,
    s3_objects,
    schema_standin,
    substitute,
    unmap,
)

TEXT = """\
# ${...} in a comment is not a placeholder; nor is subnet-0123456789abcdef0 here
HeadNode:
  Networking:
    SubnetId: ${Network.HeadNodeSubnetId}
  Iam:
    AdditionalIamPolicies:
    - Policy: arn:${AWS::Partition}:iam::aws:policy/AmazonSSMManagedInstanceCore
    - Policy: ${Cluster.HeadNodePolicyArn}
  CustomActions:
    OnNodeConfigured:
      Script: s3://${Assets.Bucket}/abc.sh
Scheduling:
  SlurmQueues:
  - Networking:
      SubnetIds: [subnet-0a1b2c3d4e5f60719, "${Network.Typo-Id}"]
SharedStorage:
- FsxLustreSettings: {FileSystemId: fs-0123456789abcdef0}
"""


def test_tokens_found_in_values_only_with_positions():
    found = {use.token: (use.kind, use.line, use.col) for use in find_tokens(TEXT)}
    assert found == {
        "${Network.HeadNodeSubnetId}": ("subnet", 4, 15),
        "${AWS::Partition}": ("aws-pseudo", 7, 19),
        "${Cluster.HeadNodePolicyArn}": ("iam-policy", 8, 15),
        "${Assets.Bucket}": ("bucket", 11, 20),
        "subnet-0a1b2c3d4e5f60719": ("subnet", 15, 19),
        "${Network.Typo-Id}": ("unknown", 15, 45),  # quoted: the quote's column
        "fs-0123456789abcdef0": ("fsx", 17, 37),
    }


def test_kinds_follow_the_output_suffix():
    assert placeholder_kind("Cluster.LoginNodePolicyArn") == "iam-policy"
    assert placeholder_kind("Network.ClusterSecurityGroupId") == "sg"
    assert placeholder_kind("Storage.FileSystemId") == "fsx"
    assert placeholder_kind("Cluster.Region") == "region"
    assert placeholder_kind("Network.Something") == "unknown"
    assert placeholder_kind("Foo.VpcId") == "unknown"


def test_standins_are_well_formed_and_stable():
    assert schema_standin("${Storage.FileSystemId}", "fsx", "us-east-1") == schema_standin(
        "${Storage.FileSystemId}", "fsx", "us-east-1"
    )
    assert len(schema_standin("${Storage.FileSystemId}", "fsx", "us-east-1")) == len("fs-") + 17
    assert schema_standin("${AWS::Partition}", "aws-pseudo", "cn-north-1") == "aws-cn"
    assert pseudo_value("${AWS::AccountId}", "us-east-1") == "123456789012"


def test_substitute_and_unmap_round_trip_ids_only():
    mapping = {
        "${Assets.Bucket}": "bucket-x",
        "${AWS::Partition}": "aws",
        "subnet-0a1b2c3d4e5f60719": "subnet-1234abcd",
    }
    replaced = substitute(TEXT, mapping)
    assert "s3://bucket-x/abc.sh" in replaced and "arn:aws:iam::aws:policy" in replaced
    ids_only = {token: value for token, value in mapping.items() if is_id_like(token)}
    message = unmap("subnet subnet-1234abcd in partition aws", ids_only)
    assert message == "subnet subnet-0a1b2c3d4e5f60719 in partition aws"


def test_s3_objects():
    text = "Script: s3://b/k1.sh\n  - CK_BUNDLE=s3://b/dir/k2.zip\n"
    assert s3_objects(text) == [("b", "dir/k2.zip"), ("b", "k1.sh")]

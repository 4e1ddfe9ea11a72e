"""Shared by the price tests: a real boto3 Price List client with botocore's Stubber in front of it."""
from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber


@pytest.fixture
def pricing():
    """(client, stubber): every get_products call must match a queued response, and all must be used."""
    client = boto3.client("pricing", region_name="us-east-1")
    with Stubber(client) as stubber:
        yield client, stubber
        stubber.assert_no_pending_responses()

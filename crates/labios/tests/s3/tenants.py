"""What both gateway suites share: the gateway's address, a boto3 client per
application (LABIOS_S3_URL, ALICE_KEY/SECRET, BOB_KEY/SECRET, as set by
crates/labios/tests/s3_gateway.rs) and deterministic data."""

import hashlib
import os

import boto3
from botocore.config import Config

URL = os.environ["LABIOS_S3_URL"]
# Names of this run, so that a suite can run again on the same data.
RUN = os.urandom(3).hex()


def client(key, secret, signature=None):
    config = Config(
        s3={"addressing_style": "path"},
        retries={"max_attempts": 1},
        signature_version=signature,
    )
    return boto3.client(
        "s3",
        endpoint_url=URL,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=config,
    )


def retrying(key, secret):
    """A client that retries as boto3 does by default (standard mode, up to
    5 attempts), and the list of the HTTP requests it sent, by operation."""
    s3 = boto3.client(
        "s3",
        endpoint_url=URL,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 5, "mode": "standard"}),
    )
    sent = []
    s3.meta.events.register("before-send.s3.*", lambda request, **kw: sent.append(request.method))
    return s3, sent


alice = client(os.environ["ALICE_KEY"], os.environ["ALICE_SECRET"])
bob = client(os.environ["BOB_KEY"], os.environ["BOB_SECRET"])


def code(e):
    """The S3 error code of a pytest.raises(ClientError) result."""
    return e.value.response["Error"]["Code"]


def data(n, seed=1):
    """n deterministic pseudo-random bytes."""
    out = bytearray()
    block = hashlib.sha256(str(seed).encode()).digest()
    while len(out) < n:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:n])

"""boto3 against the object buckets of `labios s3` (`[s3.buckets.NAME]`):
buckets kept in a directory of a file system by each objects-to-files
mapping of IRIS (one-to-one, n-to-one, n-to-m, hashed-n-to-m).

Run by crates/labios/tests/s3_gateway.rs with LABIOS_S3_URL, ALICE_*/BOB_*
credentials and OBJECT_BUCKETS (the configured bucket names, owned by
alice, each with max_object_size = 16 MiB).
"""

import hashlib
import os

import pytest
from datetime import datetime, timezone
from botocore.exceptions import ClientError

from tenants import RUN, alice, bob, code, data

BUCKETS = os.environ["OBJECT_BUCKETS"].split(",")


def md5(b):
    return f'"{hashlib.md5(b).hexdigest()}"'


@pytest.fixture(params=BUCKETS)
def bucket(request):
    return request.param


def test_buckets_are_listed_for_their_owner_only():
    names = {b["Name"] for b in alice.list_buckets()["Buckets"]}
    assert set(BUCKETS) <= names
    assert not set(BUCKETS) & {b["Name"] for b in bob.list_buckets()["Buckets"]}
    for b in BUCKETS:
        alice.head_bucket(Bucket=b)
        with pytest.raises(ClientError) as e:
            alice.create_bucket(Bucket=b)
        assert code(e) == "BucketAlreadyOwnedByYou"
        with pytest.raises(ClientError) as e:
            bob.create_bucket(Bucket=b)
        assert code(e) == "BucketAlreadyExists"
        with pytest.raises(ClientError) as e:
            alice.delete_bucket(Bucket=b)
        assert code(e) == "InvalidRequest"


def test_objects_round_trip(bucket):
    body = data(300_000, 1)
    put = alice.put_object(Bucket=bucket, Key=f"{RUN}/x/obj.bin", Body=body,
                           ContentType="application/x-netcdf", Metadata={"step": "7"})
    assert put["ETag"] == md5(body)
    got = alice.get_object(Bucket=bucket, Key=f"{RUN}/x/obj.bin")
    assert got["Body"].read() == body
    assert got["ETag"] == md5(body)
    assert got["ContentType"] == "application/x-netcdf"
    assert got["Metadata"] == {"step": "7"}
    part = alice.get_object(Bucket=bucket, Key=f"{RUN}/x/obj.bin", Range="bytes=1000-1999")
    assert part["Body"].read() == body[1000:2000]
    assert part["ContentRange"] == "bytes 1000-1999/300000"
    head = alice.head_object(Bucket=bucket, Key=f"{RUN}/x/obj.bin")
    assert head["ContentLength"] == len(body) and head["ETag"] == md5(body)
    # A checksum verified at upload is kept in the sidecar and given back.
    summed = alice.put_object(Bucket=bucket, Key=f"{RUN}/sum", Body=body, ChecksumAlgorithm="SHA256",
                              Expires=datetime(2030, 1, 2, tzinfo=timezone.utc))
    head = alice.head_object(Bucket=bucket, Key=f"{RUN}/sum", ChecksumMode="ENABLED")
    assert head["ChecksumSHA256"] == summed["ChecksumSHA256"]
    assert head["ResponseMetadata"]["HTTPHeaders"]["expires"] == "Wed, 02 Jan 2030 00:00:00 GMT"
    alice.delete_object(Bucket=bucket, Key=f"{RUN}/sum")
    # Replacing keeps one object, with the new bytes and metadata.
    alice.put_object(Bucket=bucket, Key=f"{RUN}/x/obj.bin", Body=b"v2")
    got = alice.get_object(Bucket=bucket, Key=f"{RUN}/x/obj.bin")
    assert got["Body"].read() == b"v2" and got["Metadata"] == {}
    big = data(9 << 20, 2)
    alice.put_object(Bucket=bucket, Key=f"{RUN}/big", Body=big)
    assert alice.get_object(Bucket=bucket, Key=f"{RUN}/big")["Body"].read() == big
    alice.delete_object(Bucket=bucket, Key=f"{RUN}/x/obj.bin")
    alice.delete_object(Bucket=bucket, Key=f"{RUN}/big")
    with pytest.raises(ClientError) as e:
        alice.get_object(Bucket=bucket, Key=f"{RUN}/x/obj.bin")
    assert code(e) == "NoSuchKey"
    alice.delete_object(Bucket=bucket, Key=f"{RUN}/x/obj.bin")


def test_listing(bucket):
    keys = [f"{RUN}/l/{k}" for k in ("a/1", "a/2", "b", "c/d/e", "f g")]
    for k in keys:
        alice.put_object(Bucket=bucket, Key=k, Body=k.encode())
    listed = alice.list_objects_v2(Bucket=bucket, Prefix=f"{RUN}/l/")
    assert [o["Key"] for o in listed["Contents"]] == sorted(keys)
    assert all(o["ETag"] == md5(o["Key"].encode()) for o in listed["Contents"])
    top = alice.list_objects_v2(Bucket=bucket, Prefix=f"{RUN}/l/", Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == [f"{RUN}/l/a/", f"{RUN}/l/c/"]
    assert [o["Key"] for o in top["Contents"]] == [f"{RUN}/l/b", f"{RUN}/l/f g"]
    pages = list(alice.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=f"{RUN}/l/", PaginationConfig={"PageSize": 2}))
    assert len(pages) == 3
    assert [o["Key"] for p in pages for o in p["Contents"]] == sorted(keys)
    v1 = alice.list_objects(Bucket=bucket, Prefix=f"{RUN}/l/")
    assert [o["Key"] for o in v1["Contents"]] == sorted(keys)
    r = alice.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys]})
    assert len(r["Deleted"]) == len(keys)
    assert alice.list_objects_v2(Bucket=bucket, Prefix=f"{RUN}/l/")["KeyCount"] == 0


def test_copies_in_and_out_of_the_namespace(bucket):
    ns = f"ns-{bucket}-{RUN}"[:63]
    alice.create_bucket(Bucket=ns)
    body = data(2 << 20, 3)
    alice.put_object(Bucket=ns, Key="src", Body=body, Metadata={"from": "namespace"})
    alice.copy_object(Bucket=bucket, Key=f"{RUN}/copied", CopySource={"Bucket": ns, "Key": "src"})
    got = alice.get_object(Bucket=bucket, Key=f"{RUN}/copied")
    assert got["Body"].read() == body and got["Metadata"] == {"from": "namespace"}
    alice.copy_object(Bucket=bucket, Key=f"{RUN}/again", CopySource={"Bucket": bucket, "Key": f"{RUN}/copied"},
                      MetadataDirective="REPLACE", Metadata={"from": "itself"})
    assert alice.head_object(Bucket=bucket, Key=f"{RUN}/again")["Metadata"] == {"from": "itself"}
    alice.copy_object(Bucket=ns, Key="back", CopySource={"Bucket": bucket, "Key": f"{RUN}/again"})
    got = alice.get_object(Bucket=ns, Key="back")
    assert got["Body"].read() == body and got["ETag"] == md5(body)


def test_multipart_upload(bucket):
    parts = [data(5 << 20, 10), data(5 << 20, 11), data(100, 12)]
    key = f"{RUN}/mp"
    uid = alice.create_multipart_upload(Bucket=bucket, Key=key, Metadata={"k": "v"})["UploadId"]
    etags = [alice.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=n, Body=p)["ETag"]
             for n, p in enumerate(parts, 1)]
    assert [u["UploadId"] for u in alice.list_multipart_uploads(Bucket=bucket)["Uploads"]] == [uid]
    r = alice.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": t} for n, t in enumerate(etags, 1)]})
    assert r["ETag"].endswith('-3"')
    # Completed again (the first answer lost): the same answer.
    again = alice.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": t} for n, t in enumerate(etags, 1)]})
    assert again["ETag"] == r["ETag"]
    last = alice.get_object(Bucket=bucket, Key=key, PartNumber=3)
    assert last["PartsCount"] == 3 and last["Body"].read() == parts[2]
    got = alice.get_object(Bucket=bucket, Key=key)
    assert got["Body"].read() == b"".join(parts)
    assert got["ETag"] == r["ETag"] and got["Metadata"] == {"k": "v"}


def test_limits_and_errors(bucket):
    # Refused mid-body and before the body: the unread bytes must not be
    # taken for the next request on the connection (once 1 in 3 runs).
    too_big = data((16 << 20) + 1, 4)
    for i in range(3):
        with pytest.raises(ClientError) as e:
            alice.put_object(Bucket=bucket, Key=f"{RUN}/too-big", Body=too_big)
        assert code(e) == "EntityTooLarge"
        with pytest.raises(ClientError) as e:
            alice.head_object(Bucket=bucket, Key=f"{RUN}/too-big")
        assert code(e) == "404"
        with pytest.raises(ClientError) as e:
            alice.put_object(Bucket=bucket, Key=".labios-meta/forged", Body=b"x")
        assert code(e) == "InvalidArgument"
        alice.put_object(Bucket=bucket, Key=f"{RUN}/after-refusals-{i}", Body=b"fine")
    alice.put_object(Bucket=bucket, Key=f"{RUN}/mine", Body=b"alice's")
    for call in (
        lambda: bob.get_object(Bucket=bucket, Key=f"{RUN}/mine"),
        lambda: bob.put_object(Bucket=bucket, Key=f"{RUN}/mine", Body=b"bob's"),
        lambda: bob.delete_object(Bucket=bucket, Key=f"{RUN}/mine"),
        lambda: bob.list_objects_v2(Bucket=bucket),
        lambda: bob.create_multipart_upload(Bucket=bucket, Key="x"),
    ):
        with pytest.raises(ClientError) as e:
            call()
        assert code(e) == "AccessDenied"
    assert alice.get_object(Bucket=bucket, Key=f"{RUN}/mine")["Body"].read() == b"alice's"
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key=f"{RUN}/mine", Body=b"again", IfNoneMatch="*")
    assert code(e) == "PreconditionFailed"


def tags(tag_set):
    return {t["Key"]: t["Value"] for t in tag_set}


def test_tags_cors_attributes_and_part_copies(bucket):
    """Object and bucket tags, CORS rules, GetObjectAttributes and parts
    copied from ranges, on each mapping."""
    key = f"{RUN}/tagged"
    alice.put_object(Bucket=bucket, Key=key, Body=b"x" * 10, Tagging="a=1")
    assert tags(alice.get_object_tagging(Bucket=bucket, Key=key)["TagSet"]) == {"a": "1"}
    alice.put_object_tagging(Bucket=bucket, Key=key, Tagging={"TagSet": [{"Key": "b", "Value": "2"}]})
    got = alice.get_object(Bucket=bucket, Key=key)
    assert got["TagCount"] == 1 and got["Body"].read() == b"x" * 10 and got["ETag"] == md5(b"x" * 10)
    alice.delete_object_tagging(Bucket=bucket, Key=key)
    assert alice.get_object_tagging(Bucket=bucket, Key=key)["TagSet"] == []
    with pytest.raises(ClientError) as e:
        bob.get_object_tagging(Bucket=bucket, Key=key)
    assert code(e) == "AccessDenied"
    alice.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "mapping", "Value": bucket}]})
    assert tags(alice.get_bucket_tagging(Bucket=bucket)["TagSet"]) == {"mapping": bucket}
    rules = [{"AllowedOrigins": ["*"], "AllowedMethods": ["GET"]}]
    alice.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": rules})
    assert alice.get_bucket_cors(Bucket=bucket)["CORSRules"] == rules
    src = data(6 << 20, 20)
    alice.put_object(Bucket=bucket, Key=f"{RUN}/src", Body=src)
    mp = f"{RUN}/copied-parts"
    uid = alice.create_multipart_upload(Bucket=bucket, Key=mp)["UploadId"]
    parts = []
    for n, r in enumerate([f"bytes=0-{(5 << 20) - 1}", f"bytes={5 << 20}-{len(src) - 1}"], 1):
        done = alice.upload_part_copy(Bucket=bucket, Key=mp, UploadId=uid, PartNumber=n,
                                      CopySource={"Bucket": bucket, "Key": f"{RUN}/src"}, CopySourceRange=r)
        parts.append({"PartNumber": n, "ETag": done["CopyPartResult"]["ETag"]})
    alice.complete_multipart_upload(Bucket=bucket, Key=mp, UploadId=uid, MultipartUpload={"Parts": parts})
    assert alice.get_object(Bucket=bucket, Key=mp)["Body"].read() == src
    a = alice.get_object_attributes(Bucket=bucket, Key=mp, ObjectAttributes=["ObjectParts", "ObjectSize"])
    assert a["ObjectSize"] == len(src) and a["ObjectParts"]["TotalPartsCount"] == 2


def test_kept_for_a_restart(bucket):
    """Objects, tags and CORS rules the Rust test reads back after
    restarting the gateway."""
    for i in range(20):
        alice.put_object(Bucket=bucket, Key=f"kept/{i:02d}", Body=data(1000 + i, 100 + i))
    alice.put_object_tagging(Bucket=bucket, Key="kept/00", Tagging={"TagSet": [{"Key": "kept", "Value": "object"}]})
    alice.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "kept", "Value": "bucket"}]})
    alice.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [
        {"AllowedOrigins": ["https://kept.example.org"], "AllowedMethods": ["PUT"]}]})

"""boto3, unmodified, against `labios s3`: every operation of the gateway and
its errors, as a data scientist's program would see them.

Run by crates/labios/tests/s3_gateway.rs against a running gateway:
LABIOS_S3_URL, and the credentials of two applications (ALICE_KEY,
ALICE_SECRET, BOB_KEY, BOB_SECRET) from `labios app create`.
"""

import base64
import hashlib
import http.client
import os
import time
import urllib.parse
import zlib
from datetime import datetime, timedelta, timezone
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import boto3
import botocore.handlers
import pytest
from boto3.s3.transfer import TransferConfig
from botocore import UNSIGNED
from botocore.config import Config
from botocore.exceptions import ClientError

from tenants import RUN, URL, alice, bob, client, code, data, retrying


def md5(b):
    return hashlib.md5(b).hexdigest()


def status(e):
    """The HTTP status of a pytest.raises(ClientError) result."""
    return e.value.response["ResponseMetadata"]["HTTPStatusCode"]


@pytest.fixture
def bucket(request):
    """A fresh bucket of alice's, named after the test."""
    name = f"{request.node.name.replace('_', '-')[:50]}-{RUN}"
    alice.create_bucket(Bucket=name)
    return name


def test_buckets_belong_to_their_creator():
    ALPHA = f"alpha-{RUN}"
    alice.create_bucket(Bucket=ALPHA)
    alice.head_bucket(Bucket=ALPHA)
    names = [b["Name"] for b in alice.list_buckets()["Buckets"]]
    assert ALPHA in names
    assert ALPHA not in [b["Name"] for b in bob.list_buckets()["Buckets"]]
    with pytest.raises(ClientError) as e:
        alice.create_bucket(Bucket=ALPHA)
    assert code(e) == "BucketAlreadyOwnedByYou"
    with pytest.raises(ClientError) as e:
        bob.create_bucket(Bucket=ALPHA)
    assert code(e) == "BucketAlreadyExists"
    with pytest.raises(ClientError) as e:
        bob.head_bucket(Bucket=ALPHA)
    assert code(e) == "403"
    alice.put_object(Bucket=ALPHA, Key="k", Body=b"x")
    with pytest.raises(ClientError) as e:
        alice.delete_bucket(Bucket=ALPHA)
    assert code(e) == "BucketNotEmpty"
    alice.delete_object(Bucket=ALPHA, Key="k")
    alice.delete_bucket(Bucket=ALPHA)
    with pytest.raises(ClientError) as e:
        alice.head_bucket(Bucket=ALPHA)
    assert code(e) == "404"
    with pytest.raises(ClientError) as e:
        alice.create_bucket(Bucket="Bad_Name")
    assert code(e) == "InvalidBucketName"


def test_put_get_head_delete(bucket):
    body = data(100_000)
    put = alice.put_object(
        Bucket=bucket,
        Key="runs/42/out.csv",
        Body=body,
        ContentType="text/csv",
        Metadata={"experiment": "cm1", "step": "42"},
    )
    assert put["ETag"] == f'"{md5(body)}"'
    got = alice.get_object(Bucket=bucket, Key="runs/42/out.csv")
    assert got["Body"].read() == body
    assert got["ETag"] == put["ETag"]
    assert got["ContentType"] == "text/csv"
    assert got["Metadata"] == {"experiment": "cm1", "step": "42"}
    assert got["ContentLength"] == len(body)
    head = alice.head_object(Bucket=bucket, Key="runs/42/out.csv")
    assert head["ContentLength"] == len(body)
    assert head["ETag"] == put["ETag"]
    assert head["Metadata"]["experiment"] == "cm1"
    # Replacing an object replaces all of it.
    alice.put_object(Bucket=bucket, Key="runs/42/out.csv", Body=b"short")
    got = alice.get_object(Bucket=bucket, Key="runs/42/out.csv")
    assert got["Body"].read() == b"short"
    assert "experiment" not in got["Metadata"]
    alice.delete_object(Bucket=bucket, Key="runs/42/out.csv")
    with pytest.raises(ClientError) as e:
        alice.get_object(Bucket=bucket, Key="runs/42/out.csv")
    assert code(e) == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        alice.head_object(Bucket=bucket, Key="runs/42/out.csv")
    assert code(e) == "404"
    # Deleting what is not there is no error, as in S3.
    alice.delete_object(Bucket=bucket, Key="runs/42/out.csv")
    # The emptied prefix is gone too.
    assert alice.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_empty_and_large_objects(bucket):
    alice.put_object(Bucket=bucket, Key="empty", Body=b"")
    got = alice.get_object(Bucket=bucket, Key="empty")
    assert got["Body"].read() == b""
    assert got["ETag"] == f'"{md5(b"")}"'
    body = data(9 << 20, seed=2)
    alice.put_object(Bucket=bucket, Key="nine-mib", Body=body)
    assert alice.get_object(Bucket=bucket, Key="nine-mib")["Body"].read() == body


def test_part_one_of_a_plain_object_is_all_of_it(bucket):
    alice.put_object(Bucket=bucket, Key="plain", Body=b"whole")
    got = alice.get_object(Bucket=bucket, Key="plain", PartNumber=1)
    assert got["Body"].read() == b"whole" and "PartsCount" not in got
    with pytest.raises(ClientError) as e:
        alice.head_object(Bucket=bucket, Key="plain", PartNumber=2)
    assert status(e) == 416


def test_range_get(bucket):
    body = data(10_000, seed=3)
    alice.put_object(Bucket=bucket, Key="r", Body=body)
    got = alice.get_object(Bucket=bucket, Key="r", Range="bytes=10-19")
    assert got["Body"].read() == body[10:20]
    assert got["ContentRange"] == "bytes 10-19/10000"
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert alice.get_object(Bucket=bucket, Key="r", Range="bytes=-5")["Body"].read() == body[-5:]
    assert alice.get_object(Bucket=bucket, Key="r", Range="bytes=9990-")["Body"].read() == body[9990:]
    with pytest.raises(ClientError) as e:
        alice.get_object(Bucket=bucket, Key="r", Range="bytes=20000-20010")
    assert code(e) == "InvalidRange"


def test_list_objects_v2_prefix_delimiter_pages(bucket):
    keys = ["a/1", "a/2", "a/sub/3", "b/x/y", "c", "sp ace+%&.txt", "ünï/😀"]
    for k in keys:
        alice.put_object(Bucket=bucket, Key=k, Body=k.encode())
    listed = alice.list_objects_v2(Bucket=bucket)
    assert [o["Key"] for o in listed["Contents"]] == sorted(keys, key=lambda k: k.encode())
    assert all(o["ETag"] == f'"{md5(o["Key"].encode())}"' for o in listed["Contents"])
    top = alice.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["a/", "b/", "ünï/"]
    assert [o["Key"] for o in top["Contents"]] == ["c", "sp ace+%&.txt"]
    a = alice.list_objects_v2(Bucket=bucket, Prefix="a/", Delimiter="/")
    assert [o["Key"] for o in a["Contents"]] == ["a/1", "a/2"]
    assert [p["Prefix"] for p in a["CommonPrefixes"]] == ["a/sub/"]
    seen, token = [], None
    while True:
        kw = {"ContinuationToken": token} if token else {}
        page = alice.list_objects_v2(Bucket=bucket, MaxKeys=2, **kw)
        seen += [o["Key"] for o in page.get("Contents", [])]
        assert page["KeyCount"] <= 2
        if not page["IsTruncated"]:
            break
        token = page["NextContinuationToken"]
    assert seen == sorted(keys, key=lambda k: k.encode())
    after = alice.list_objects_v2(Bucket=bucket, StartAfter="b/x/y")
    assert [o["Key"] for o in after["Contents"]] == ["c", "sp ace+%&.txt", "ünï/😀"]
    with pytest.raises(ClientError) as e:
        alice.list_objects_v2(Bucket=bucket, ContinuationToken="not-a-token")
    assert code(e) == "InvalidArgument"


def test_list_objects_v1_and_paginator(bucket):
    keys = [f"many/{i:04d}" for i in range(1100)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda k: alice.put_object(Bucket=bucket, Key=k, Body=b"x"), keys))
    pages = list(alice.get_paginator("list_objects_v2").paginate(Bucket=bucket))
    assert len(pages) == 2
    assert [o["Key"] for p in pages for o in p["Contents"]] == keys
    v1 = alice.list_objects(Bucket=bucket, Prefix="many/", MaxKeys=500)
    assert v1["IsTruncated"] and len(v1["Contents"]) == 500
    rest = alice.list_objects(Bucket=bucket, Prefix="many/", Marker=v1["Contents"][-1]["Key"])
    assert [o["Key"] for o in v1["Contents"] + rest["Contents"]] == keys
    pages = list(alice.get_paginator("list_objects").paginate(Bucket=bucket, Delimiter="/"))
    assert [p["Prefix"] for p in pages[0]["CommonPrefixes"]] == ["many/"]


def test_listing_edges(bucket):
    """MaxKeys=0, an empty delimiter, ListObjects' marker and its prefix as
    sent, and the null versions of an unversioned bucket (how tools empty
    one)."""
    keys = ["a b/1", "a b/2", "c"]
    for k in keys:
        alice.put_object(Bucket=bucket, Key=k, Body=b"x")
    for listed in (alice.list_objects_v2(Bucket=bucket, MaxKeys=0), alice.list_objects(Bucket=bucket, MaxKeys=0)):
        assert listed["IsTruncated"] is False and "Contents" not in listed, listed
    listed = alice.list_objects_v2(Bucket=bucket, Delimiter="")
    assert "Delimiter" not in listed and [o["Key"] for o in listed["Contents"]] == keys
    assert alice.list_objects(Bucket=bucket)["Marker"] == ""
    # Without encoding-type=url (which boto3 adds unless told not to), the
    # prefix comes back as sent.
    plain = client(os.environ["ALICE_KEY"], os.environ["ALICE_SECRET"], signature="s3v4")
    plain.meta.events.unregister("before-parameter-build.s3.ListObjects",
                                 botocore.handlers.set_list_objects_encoding_type_url)
    url = plain.generate_presigned_url("list_objects", Params={"Bucket": bucket, "Prefix": "a b/"})
    assert "encoding-type" not in url
    with urllib.request.urlopen(url) as r:
        body = r.read().decode()
    assert "<Prefix>a b/</Prefix>" in body and "<Key>a b/1</Key>" in body, body
    assert "<Marker></Marker>" in body or "<Marker/>" in body, body
    assert "Status" not in alice.get_bucket_versioning(Bucket=bucket)
    first = alice.list_object_versions(Bucket=bucket, MaxKeys=2)
    assert [(v["Key"], v["VersionId"], v["IsLatest"]) for v in first["Versions"]] == [
        ("a b/1", "null", True), ("a b/2", "null", True)]
    assert first["IsTruncated"] and first["NextKeyMarker"] == "a b/2" and first["NextVersionIdMarker"] == "null"
    rest = alice.list_object_versions(Bucket=bucket, KeyMarker=first["NextKeyMarker"],
                                      VersionIdMarker=first["NextVersionIdMarker"])
    assert [v["Key"] for v in rest["Versions"]] == ["c"] and not rest["IsTruncated"]
    assert rest["Versions"][0]["ETag"] == f'"{md5(b"x")}"' and rest["Versions"][0]["Size"] == 1
    every = [{"Key": v["Key"], "VersionId": v["VersionId"]} for v in first["Versions"] + rest["Versions"]]
    alice.delete_objects(Bucket=bucket, Delete={"Objects": every})
    assert alice.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_list_buckets_pages():
    names = [f"pages-{RUN}-{n}" for n in range(3)]
    for n in names:
        bob.create_bucket(Bucket=n)
    first = bob.list_buckets(Prefix=f"pages-{RUN}", MaxBuckets=2)
    assert [b["Name"] for b in first["Buckets"]] == names[:2] and first["Prefix"] == f"pages-{RUN}"
    rest = bob.list_buckets(Prefix=f"pages-{RUN}", MaxBuckets=2, ContinuationToken=first["ContinuationToken"])
    assert [b["Name"] for b in rest["Buckets"]] == names[2:] and "ContinuationToken" not in rest
    assert set(names) <= {b["Name"] for b in bob.list_buckets()["Buckets"]}
    with pytest.raises(ClientError) as e:
        bob.list_buckets(MaxBuckets=10001)
    assert code(e) == "InvalidArgument"
    for n in names:
        bob.delete_bucket(Bucket=n)


def test_folders(bucket):
    alice.put_object(Bucket=bucket, Key="empty-folder/", Body=b"")
    alice.put_object(Bucket=bucket, Key="full/file", Body=b"f")
    keys = [o["Key"] for o in alice.list_objects_v2(Bucket=bucket)["Contents"]]
    assert keys == ["empty-folder/", "full/file"]
    assert alice.head_object(Bucket=bucket, Key="empty-folder/")["ContentLength"] == 0
    # A file system holds a file or a directory under one name, never both:
    # 409, which a retrying client sends once.
    s3, sent = retrying(os.environ["ALICE_KEY"], os.environ["ALICE_SECRET"])
    with pytest.raises(ClientError) as e:
        s3.put_object(Bucket=bucket, Key="full", Body=b"a file where a folder is")
    assert code(e) == "ExistingObjectIsDirectory" and status(e) == 409 and sent == ["PUT"]
    alice.put_object(Bucket=bucket, Key="file", Body=b"f")
    for key, call in (("file/under", s3.put_object), ("file/", s3.put_object), ("file/copy", s3.copy_object)):
        del sent[:]
        args = {"CopySource": {"Bucket": bucket, "Key": "full/file"}} if call == s3.copy_object else {"Body": b""}
        with pytest.raises(ClientError) as e:
            call(Bucket=bucket, Key=key, **args)
        assert code(e) == "ObjectParentIsFile" and status(e) == 409 and len(sent) == 1, (key, e.value.response)
        assert f"/{bucket}/file " in e.value.response["Error"]["Message"], e.value.response
    uid, listed = upload(bucket, "file/mp", [b"p"])
    with pytest.raises(ClientError) as e:
        alice.complete_multipart_upload(Bucket=bucket, Key="file/mp", UploadId=uid, MultipartUpload=listed)
    assert code(e) == "ObjectParentIsFile" and status(e) == 409
    alice.abort_multipart_upload(Bucket=bucket, Key="file/mp", UploadId=uid)
    assert alice.get_object(Bucket=bucket, Key="file")["Body"].read() == b"f"
    alice.delete_object(Bucket=bucket, Key="file")
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key="x//y", Body=b"")
    assert code(e) == "InvalidArgument"
    alice.delete_object(Bucket=bucket, Key="empty-folder/")
    alice.delete_object(Bucket=bucket, Key="full/file")
    assert alice.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


def test_multipart_upload(bucket):
    parts = [data(5 << 20, seed=10), data(5 << 20, seed=11), data(1 << 20, seed=12)]
    up = alice.create_multipart_upload(Bucket=bucket, Key="mp/obj", ContentType="application/x-hdf5",
                                       Metadata={"kind": "checkpoint"})
    uid = up["UploadId"]
    etags = []
    # Parts arrive out of order, as parallel uploaders send them.
    for n in (2, 1, 3):
        r = alice.upload_part(Bucket=bucket, Key="mp/obj", UploadId=uid, PartNumber=n, Body=parts[n - 1])
        assert r["ETag"] == f'"{md5(parts[n - 1])}"'
        etags.append((n, r["ETag"]))
    listed = alice.list_parts(Bucket=bucket, Key="mp/obj", UploadId=uid)
    assert [p["PartNumber"] for p in listed["Parts"]] == [1, 2, 3]
    assert [p["Size"] for p in listed["Parts"]] == [len(p) for p in parts]
    uploads = alice.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in uploads] == [("mp/obj", uid)]
    # The object does not exist until the upload completes.
    with pytest.raises(ClientError) as e:
        alice.head_object(Bucket=bucket, Key="mp/obj")
    assert code(e) == "404"
    done = sorted(etags)
    with pytest.raises(ClientError) as e:
        alice.complete_multipart_upload(Bucket=bucket, Key="mp/obj", UploadId=uid, MultipartUpload={
            "Parts": [{"PartNumber": 2, "ETag": done[1][1]}, {"PartNumber": 1, "ETag": done[0][1]}]})
    assert code(e) == "InvalidPartOrder"
    with pytest.raises(ClientError) as e:
        alice.complete_multipart_upload(Bucket=bucket, Key="mp/obj", UploadId=uid, MultipartUpload={
            "Parts": [{"PartNumber": 1, "ETag": done[1][1]}]})
    assert code(e) == "InvalidPart"
    r = alice.complete_multipart_upload(Bucket=bucket, Key="mp/obj", UploadId=uid, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": t} for n, t in done]})
    whole = b"".join(parts)
    expected = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + "-3"
    assert r["ETag"] == f'"{expected}"'
    got = alice.get_object(Bucket=bucket, Key="mp/obj")
    assert got["Body"].read() == whole
    # Each part, as uploaded, by its number.
    for n, p in enumerate(parts, 1):
        one = alice.get_object(Bucket=bucket, Key="mp/obj", PartNumber=n)
        assert one["PartsCount"] == 3 and one["ContentLength"] == len(p) and one["Body"].read() == p
    head = alice.head_object(Bucket=bucket, Key="mp/obj", PartNumber=3)
    assert head["PartsCount"] == 3 and head["ContentLength"] == len(parts[2])
    assert head["ContentRange"] == f"bytes {10 << 20}-{len(whole) - 1}/{len(whole)}"
    with pytest.raises(ClientError) as e:
        alice.get_object(Bucket=bucket, Key="mp/obj", PartNumber=4)
    assert code(e) == "InvalidPartNumber" and status(e) == 416
    assert got["ContentType"] == "application/x-hdf5"
    assert got["Metadata"] == {"kind": "checkpoint"}
    assert alice.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    with pytest.raises(ClientError) as e:
        alice.upload_part(Bucket=bucket, Key="mp/obj", UploadId=uid, PartNumber=1, Body=b"late")
    assert code(e) == "NoSuchUpload"
    # An aborted upload leaves nothing behind.
    up = alice.create_multipart_upload(Bucket=bucket, Key="mp/aborted")
    alice.upload_part(Bucket=bucket, Key="mp/aborted", UploadId=up["UploadId"], PartNumber=1, Body=b"p")
    alice.abort_multipart_upload(Bucket=bucket, Key="mp/aborted", UploadId=up["UploadId"])
    assert alice.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    with pytest.raises(ClientError) as e:
        alice.list_parts(Bucket=bucket, Key="mp/aborted", UploadId=up["UploadId"])
    assert code(e) == "NoSuchUpload"
    with pytest.raises(ClientError) as e:
        alice.upload_part(Bucket=bucket, Key="mp/x", UploadId="../../etc", PartNumber=1, Body=b"p")
    assert code(e) == "NoSuchUpload"


def upload(bucket, key, parts):
    """An upload of alice's with `parts` sent; its id and the part list that completes it."""
    uid = alice.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    listed = [{"PartNumber": n, "ETag": alice.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=n,
                                                        Body=p)["ETag"]}
              for n, p in enumerate(parts, 1)]
    return uid, {"Parts": listed}


def test_complete_multipart_upload_again_answers_the_same(bucket):
    """A client whose first Complete answer was lost completes again: S3
    answers with the same ETag while the object is unchanged, and a client
    that retries sends the request once."""
    parts = [data(5 << 20, seed=50), data(1000, seed=51)]
    uid, listed = upload(bucket, "again", parts)
    first = alice.complete_multipart_upload(Bucket=bucket, Key="again", UploadId=uid, MultipartUpload=listed)
    s3, sent = retrying(os.environ["ALICE_KEY"], os.environ["ALICE_SECRET"])
    again = s3.complete_multipart_upload(Bucket=bucket, Key="again", UploadId=uid, MultipartUpload=listed)
    assert again["ETag"] == first["ETag"] and sent == ["POST"]
    assert alice.get_object(Bucket=bucket, Key="again")["Body"].read() == b"".join(parts)
    # Another upload's id, or the object changed since: the upload is gone.
    other, _ = upload(bucket, "other", [b"x"])
    with pytest.raises(ClientError) as e:
        alice.complete_multipart_upload(Bucket=bucket, Key="again", UploadId=other, MultipartUpload=listed)
    assert code(e) == "NoSuchUpload"
    alice.put_object(Bucket=bucket, Key="again", Body=b"replaced")
    with pytest.raises(ClientError) as e:
        alice.complete_multipart_upload(Bucket=bucket, Key="again", UploadId=uid, MultipartUpload=listed)
    assert code(e) == "NoSuchUpload"
    alice.abort_multipart_upload(Bucket=bucket, Key="other", UploadId=other)


def test_complete_multipart_upload_checks_the_parts(bucket):
    """Parts listed twice or out of order, and parts under 5 MiB but the
    last, are refused with S3's codes, once, through a retrying client; the
    upload stays and completes once the list is right."""
    small = [data(1 << 20, seed=60), data(1 << 20, seed=61)]
    uid, listed = upload(bucket, "small", small)
    s3, sent = retrying(os.environ["ALICE_KEY"], os.environ["ALICE_SECRET"])
    with pytest.raises(ClientError) as e:
        s3.complete_multipart_upload(Bucket=bucket, Key="small", UploadId=uid, MultipartUpload=listed)
    assert code(e) == "EntityTooSmall" and sent == ["POST"]
    assert "part 1 has 1048576 bytes" in e.value.response["Error"]["Message"]
    twice = {"Parts": [listed["Parts"][0], listed["Parts"][0]]}
    with pytest.raises(ClientError) as e:
        alice.complete_multipart_upload(Bucket=bucket, Key="small", UploadId=uid, MultipartUpload=twice)
    assert code(e) == "InvalidPartOrder"
    with pytest.raises(ClientError) as e:
        alice.head_object(Bucket=bucket, Key="small")
    assert code(e) == "404"
    # A lone small part is the last part.
    one = {"Parts": listed["Parts"][:1]}
    done = alice.complete_multipart_upload(Bucket=bucket, Key="small", UploadId=uid, MultipartUpload=one)
    assert done["ETag"].endswith('-1"')
    assert alice.get_object(Bucket=bucket, Key="small")["Body"].read() == small[0]


def test_managed_transfers(bucket, tmp_path):
    """upload_file and download_file: multipart and parallel ranged GETs."""
    src = tmp_path / "src.bin"
    src.write_bytes(data(12 << 20, seed=20))
    cfg = TransferConfig(multipart_threshold=5 << 20, multipart_chunksize=5 << 20, max_concurrency=4)
    alice.upload_file(str(src), bucket, "transfer/src.bin", Config=cfg)
    dst = tmp_path / "dst.bin"
    alice.download_file(bucket, "transfer/src.bin", str(dst), Config=cfg)
    assert dst.read_bytes() == src.read_bytes()
    assert alice.head_object(Bucket=bucket, Key="transfer/src.bin")["ETag"].endswith('-3"')


def test_copy_object(bucket):
    target = f"copy-target-{RUN}"
    alice.create_bucket(Bucket=target)
    body = data(3 << 20, seed=30)
    alice.put_object(Bucket=bucket, Key="src", Body=body, ContentType="image/png", Metadata={"a": "1"})
    alice.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    got = alice.get_object(Bucket=bucket, Key="dst")
    assert got["Body"].read() == body and got["Metadata"] == {"a": "1"}
    assert got["ContentType"] == "image/png"
    r = alice.copy_object(Bucket=target, Key="x/dst", CopySource=f"{bucket}/src",
                          MetadataDirective="REPLACE", Metadata={"b": "2"}, ContentType="text/plain")
    assert r["CopyObjectResult"]["ETag"] == f'"{md5(body)}"'
    got = alice.get_object(Bucket=target, Key="x/dst")
    assert got["Body"].read() == body and got["Metadata"] == {"b": "2"}
    with pytest.raises(ClientError) as e:
        alice.copy_object(Bucket=bucket, Key="src", CopySource={"Bucket": bucket, "Key": "src"})
    assert code(e) == "InvalidRequest"
    alice.copy_object(Bucket=bucket, Key="src", CopySource={"Bucket": bucket, "Key": "src"},
                      MetadataDirective="REPLACE", Metadata={"c": "3"})
    assert alice.head_object(Bucket=bucket, Key="src")["Metadata"] == {"c": "3"}
    with pytest.raises(ClientError) as e:
        alice.copy_object(Bucket=bucket, Key="d2", CopySource={"Bucket": bucket, "Key": "missing"})
    assert code(e) == "NoSuchKey"


def test_metadata_cannot_set_hints(bucket):
    """x-amz-meta-labios.* would land among a file's hints (README "Hints"),
    which S3 requests cannot set: refused, and nothing is stored."""
    hint = {"labios.placement": "local"}
    for call in (
        lambda: alice.put_object(Bucket=bucket, Key="h", Body=b"x", Metadata=hint),
        lambda: alice.create_multipart_upload(Bucket=bucket, Key="h", Metadata=hint),
    ):
        with pytest.raises(ClientError) as e:
            call()
        assert code(e) == "InvalidArgument" and "labios hint set" in str(e.value)
    alice.put_object(Bucket=bucket, Key="src", Body=b"x")
    with pytest.raises(ClientError) as e:
        alice.copy_object(Bucket=bucket, Key="h", CopySource=f"{bucket}/src",
                          MetadataDirective="REPLACE", Metadata=hint)
    assert code(e) == "InvalidArgument"
    keys = [o["Key"] for o in alice.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys == ["src"]


def test_delete_objects(bucket):
    for k in ("d/1", "d/2", "d/3"):
        alice.put_object(Bucket=bucket, Key=k, Body=b"x")
    r = alice.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "d/1"}, {"Key": "d/2"}, {"Key": "never"}]})
    assert sorted(d["Key"] for d in r["Deleted"]) == ["d/1", "d/2", "never"]
    r = alice.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "d/3"}], "Quiet": True})
    assert "Deleted" not in r or r["Deleted"] == []
    assert alice.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    alice.put_object(Bucket=bucket, Key="kept", Body=b"k")
    with pytest.raises(ClientError) as e:
        alice.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": f"k{n}"} for n in range(1000)] + [{"Key": "kept"}]})
    assert code(e) == "MalformedXML" and "1001 keys" in e.value.response["Error"]["Message"]
    assert alice.get_object(Bucket=bucket, Key="kept")["Body"].read() == b"k"


def test_conditional_requests(bucket):
    put = alice.put_object(Bucket=bucket, Key="c", Body=b"v1")
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key="c", Body=b"v2", IfNoneMatch="*")
    assert code(e) == "PreconditionFailed"
    alice.put_object(Bucket=bucket, Key="new", Body=b"n", IfNoneMatch="*")
    with pytest.raises(ClientError) as e:
        alice.get_object(Bucket=bucket, Key="c", IfNoneMatch=put["ETag"])
    assert code(e) == "304"
    # What a cache revalidates against comes with the 304.
    headers = e.value.response["ResponseMetadata"]["HTTPHeaders"]
    assert headers["etag"] == put["ETag"], headers
    assert headers["last-modified"] == alice.head_object(Bucket=bucket, Key="c")["ResponseMetadata"][
        "HTTPHeaders"]["last-modified"]
    with pytest.raises(ClientError) as e:
        alice.head_object(Bucket=bucket, Key="c", IfModifiedSince=datetime.now(timezone.utc) + timedelta(hours=1))
    assert code(e) == "304"
    assert e.value.response["ResponseMetadata"]["HTTPHeaders"]["etag"] == put["ETag"]
    with pytest.raises(ClientError) as e:
        alice.get_object(Bucket=bucket, Key="c", IfMatch='"0123456789abcdef0123456789abcdef"')
    assert code(e) == "PreconditionFailed"
    assert alice.get_object(Bucket=bucket, Key="c", IfMatch=put["ETag"])["Body"].read() == b"v1"


def test_copy_conditions(bucket):
    """x-amz-copy-source-if-*: a failed condition is 412 and copies nothing."""
    put = alice.put_object(Bucket=bucket, Key="src", Body=b"v1")
    modified = alice.head_object(Bucket=bucket, Key="src")["LastModified"]
    hour = timedelta(hours=1)
    other = '"0123456789abcdef0123456789abcdef"'
    source = {"Bucket": bucket, "Key": "src"}
    for failing in ({"CopySourceIfMatch": other}, {"CopySourceIfNoneMatch": put["ETag"]},
                    {"CopySourceIfModifiedSince": modified + hour},
                    {"CopySourceIfUnmodifiedSince": modified - hour}):
        with pytest.raises(ClientError) as e:
            alice.copy_object(Bucket=bucket, Key="dst", CopySource=source, **failing)
        assert code(e) == "PreconditionFailed", failing
        with pytest.raises(ClientError) as e:
            alice.head_object(Bucket=bucket, Key="dst")
        assert code(e) == "404", failing
    for n, passing in enumerate(({"CopySourceIfMatch": put["ETag"]}, {"CopySourceIfNoneMatch": other},
                                 {"CopySourceIfModifiedSince": modified - hour},
                                 {"CopySourceIfUnmodifiedSince": modified + hour})):
        alice.copy_object(Bucket=bucket, Key=f"dst{n}", CopySource=source, **passing)
        assert alice.get_object(Bucket=bucket, Key=f"dst{n}")["Body"].read() == b"v1"


def signed_put(path, headers, body, pieces=None):
    """A PUT signed with SigV4 as `headers` say, its body sent whole, or in
    `pieces` with Transfer-Encoding: chunked and no Content-Length."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    req = AWSRequest(method="PUT", url=f"{URL}{path}", headers=headers)
    SigV4Auth(Credentials(os.environ["ALICE_KEY"], os.environ["ALICE_SECRET"]), "s3", "us-east-1").add_auth(req)
    where = urllib.parse.urlparse(URL)
    conn = http.client.HTTPConnection(where.hostname, where.port)
    conn.putrequest("PUT", path, skip_accept_encoding=True)
    for k, v in req.headers.items():
        conn.putheader(k, v)
    if pieces:
        conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    if pieces:
        for at in range(0, len(body), pieces):
            piece = body[at:at + pieces]
            conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
        conn.send(b"0\r\n\r\n")
    else:
        conn.send(body)
    r = conn.getresponse()
    return r.status, r.read().decode()


def test_headers(bucket):
    """Expires is kept; aws-chunked (how a body travelled) is not kept as
    the object's coding; a body sent without Content-Length is taken."""
    expires = datetime(2030, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    alice.put_object(Bucket=bucket, Key="e", Body=b"x", Expires=expires, ContentEncoding="identity")
    head = alice.head_object(Bucket=bucket, Key="e")
    assert head["ResponseMetadata"]["HTTPHeaders"]["expires"] == "Wed, 02 Jan 2030 03:04:05 GMT"
    assert head["ContentEncoding"] == "identity"
    body = b"gzipped bytes " * 200
    crc = base64.b64encode(zlib.crc32(body).to_bytes(4, "big"))
    framed = b"%x\r\n%s\r\n0\r\nx-amz-checksum-crc32:%s\r\n\r\n" % (len(body), body, crc)
    status, said = signed_put(f"/{bucket}/chunked", {
        "x-amz-content-sha256": "STREAMING-UNSIGNED-PAYLOAD-TRAILER", "Content-Encoding": "aws-chunked,gzip",
        "x-amz-decoded-content-length": str(len(body)), "x-amz-trailer": "x-amz-checksum-crc32",
        "Content-Length": str(len(framed))}, framed)
    assert status == 200, said
    got = alice.get_object(Bucket=bucket, Key="chunked")
    assert got["ContentEncoding"] == "gzip" and got["Body"].read() == body
    status, said = signed_put(f"/{bucket}/streamed", {"x-amz-content-sha256": "UNSIGNED-PAYLOAD"}, body, pieces=1000)
    assert status == 200, said
    assert alice.get_object(Bucket=bucket, Key="streamed")["Body"].read() == body


def test_checksums(bucket):
    body = data(1 << 20, seed=40)
    for algorithm in ("CRC32", "SHA1", "SHA256"):
        key = f"sum/{algorithm}"
        r = alice.put_object(Bucket=bucket, Key=key, Body=body, ChecksumAlgorithm=algorithm)
        assert r["ETag"] == f'"{md5(body)}"'
        # Asked for, the checksum verified at upload comes back (and boto3
        # checks the body against it); not asked for, it does not.
        sent = r[f"Checksum{algorithm}"]
        assert alice.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")[f"Checksum{algorithm}"] == sent
        got = alice.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
        assert got[f"Checksum{algorithm}"] == sent and got["Body"].read() == body
        assert f"Checksum{algorithm}" not in alice.head_object(Bucket=bucket, Key=key)
        ranged = alice.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED", Range="bytes=0-9")
        assert f"Checksum{algorithm}" not in ranged and ranged["Body"].read() == body[:10]
    up = alice.create_multipart_upload(Bucket=bucket, Key="sum/mp", ChecksumAlgorithm="SHA256")
    assert up["ChecksumAlgorithm"] == "SHA256"
    alice.abort_multipart_upload(Bucket=bucket, Key="sum/mp", UploadId=up["UploadId"])
    wrong = base64.b64encode(hashlib.md5(b"something else").digest()).decode()
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key="sum/bad", Body=body, ContentMD5=wrong)
    assert code(e) == "BadDigest"
    with pytest.raises(ClientError) as e:
        alice.head_object(Bucket=bucket, Key="sum/bad")
    assert code(e) == "404"


def test_presigned_urls(bucket):
    alice.put_object(Bucket=bucket, Key="shared.txt", Body=b"for a browser")
    url = alice.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "shared.txt"}, ExpiresIn=60)
    with urllib.request.urlopen(url) as r:
        assert r.read() == b"for a browser"
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url.replace("Signature=", "Signature=0"))
    assert e.value.code == 403
    # SigV4 URLs are valid for at most a week, and not at all once expired.
    v4 = client(os.environ["ALICE_KEY"], os.environ["ALICE_SECRET"], signature="s3v4")
    where = {"Bucket": bucket, "Key": "shared.txt"}
    week = v4.generate_presigned_url("get_object", Params=where, ExpiresIn=604800)
    with urllib.request.urlopen(week) as r:
        assert r.read() == b"for a browser"
    for expires, words in ((604801, "less than a week"), (-5, "non-negative")):
        url = v4.generate_presigned_url("get_object", Params=where, ExpiresIn=expires)
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url)
        body = e.value.read().decode()
        assert e.value.code == 400 and "AuthorizationQueryParametersError" in body and words in body, body
    soon = v4.generate_presigned_url("get_object", Params=where, ExpiresIn=1)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(soon).read()
        except urllib.error.HTTPError as e:
            body = e.read().decode()
            assert e.code == 403 and "AccessDenied" in body and "expired" in body, body
            break
        assert time.monotonic() < deadline, "a URL valid for 1 s was still served after 30 s"


def test_presigned_put_refuses_headers_it_does_not_sign(bucket):
    v4 = client(os.environ["ALICE_KEY"], os.environ["ALICE_SECRET"], signature="s3v4")
    where = {"Bucket": bucket, "Key": "dropbox.csv"}
    url = v4.generate_presigned_url("put_object", Params=where, ExpiresIn=60)
    # Whoever holds the URL may not add metadata its signer did not sign.
    sneaky = urllib.request.Request(url, data=b"a,b\n", method="PUT",
                                    headers={"x-amz-meta-owner": "mallory"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(sneaky)
    body = e.value.read().decode()
    assert e.value.code == 403 and "AccessDenied" in body and "x-amz-meta-owner" in body, body
    with pytest.raises(ClientError) as e:
        alice.head_object(**where)
    assert code(e) == "404"
    # Metadata the signer names is signed, and is stored when sent as signed.
    signed = v4.generate_presigned_url("put_object", Params={**where, "Metadata": {"owner": "alice"}},
                                       ExpiresIn=60)
    assert "x-amz-meta-owner" in urllib.parse.unquote(signed), signed
    honest = urllib.request.Request(signed, data=b"a,b\n", method="PUT",
                                    headers={"x-amz-meta-owner": "alice"})
    with urllib.request.urlopen(honest) as r:
        assert r.status == 200
    assert alice.head_object(**where)["Metadata"] == {"owner": "alice"}
    assert alice.get_object(**where)["Body"].read() == b"a,b\n"


def test_errors_are_clear_s3_errors(bucket):
    alice.put_object(Bucket=bucket, Key="private", Body=b"alice's")
    wrong_secret = client(os.environ["ALICE_KEY"], "not-the-secret-at-all-0000000000000000")
    with pytest.raises(ClientError) as e:
        wrong_secret.get_object(Bucket=bucket, Key="private")
    assert code(e) == "SignatureDoesNotMatch"
    unknown = client("LBKNOSUCHKEY00000000", "whatever")
    with pytest.raises(ClientError) as e:
        unknown.list_buckets()
    assert code(e) == "InvalidAccessKeyId"
    assert "labios app create" in e.value.response["Error"]["Message"]
    anonymous = boto3.client("s3", endpoint_url=URL, region_name="us-east-1",
                             config=Config(signature_version=UNSIGNED, s3={"addressing_style": "path"}))
    with pytest.raises(ClientError) as e:
        anonymous.get_object(Bucket=bucket, Key="private")
    assert code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        alice.get_object(Bucket="no-such-bucket", Key="k")
    assert code(e) == "NoSuchBucket"
    with pytest.raises(ClientError) as e:
        alice.list_objects_v2(Bucket="no-such-bucket")
    assert code(e) == "NoSuchBucket"
    with pytest.raises(ClientError) as e:
        alice.get_object(Bucket=bucket, Key="no-such-key")
    assert code(e) == "NoSuchKey"
    # Every answer names its request, an error in its body too.
    said = e.value.response["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
    assert len(said) == 16 and e.value.response["ResponseMetadata"]["RequestId"] == said
    url = alice.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "no-such-key"})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url)
    assert f"<RequestId>{e.value.headers['x-amz-request-id']}</RequestId>" in e.value.read().decode()
    ok = alice.head_object(Bucket=bucket, Key="private")["ResponseMetadata"]["HTTPHeaders"]["x-amz-request-id"]
    assert len(ok) == 16 and ok != said
    # Another tenant: nothing of alice's bucket is reachable.
    for call in (
        lambda: bob.get_object(Bucket=bucket, Key="private"),
        lambda: bob.head_object(Bucket=bucket, Key="private"),
        lambda: bob.put_object(Bucket=bucket, Key="private", Body=b"bob's"),
        lambda: bob.delete_object(Bucket=bucket, Key="private"),
        lambda: bob.list_objects_v2(Bucket=bucket),
        lambda: bob.copy_object(Bucket=bucket, Key="copy", CopySource={"Bucket": bucket, "Key": "private"}),
        lambda: bob.create_multipart_upload(Bucket=bucket, Key="mp"),
        lambda: bob.delete_bucket(Bucket=bucket),
    ):
        with pytest.raises(ClientError) as e:
            call()
        assert code(e) in ("AccessDenied", "403"), e.value.response
    assert alice.get_object(Bucket=bucket, Key="private")["Body"].read() == b"alice's"
    # Bob cannot copy alice's object into his own bucket either.
    bobs = f"bobs-{RUN}"
    bob.create_bucket(Bucket=bobs)
    with pytest.raises(ClientError) as e:
        bob.copy_object(Bucket=bobs, Key="stolen", CopySource={"Bucket": bucket, "Key": "private"})
    assert code(e) == "AccessDenied"
    up = alice.create_multipart_upload(Bucket=bucket, Key="mp")
    with pytest.raises(ClientError) as e:
        bob.upload_part(Bucket=bobs, Key="mp", UploadId=up["UploadId"], PartNumber=1, Body=b"x")
    assert code(e) in ("AccessDenied", "NoSuchUpload")
    alice.abort_multipart_upload(Bucket=bucket, Key="mp", UploadId=up["UploadId"])


def test_signature_v2_clients(bucket):
    """Old clients sign with SigV2; the registry's secrets verify it too."""
    v2 = client(os.environ["ALICE_KEY"], os.environ["ALICE_SECRET"], signature="s3")
    v2.put_object(Bucket=bucket, Key="v2", Body=b"old client")
    assert v2.get_object(Bucket=bucket, Key="v2")["Body"].read() == b"old client"


def tags(tag_set):
    return {t["Key"]: t["Value"] for t in tag_set}


def test_object_tagging(bucket):
    """Tags set with a PUT, a multipart upload or PutObjectTagging are kept
    with the object, counted by GET, carried or replaced by a copy, dropped
    by an overwrite, and checked as S3 checks them."""
    alice.put_object(Bucket=bucket, Key="t", Body=b"x", Tagging="project=climate%20run&stage=raw")
    assert tags(alice.get_object_tagging(Bucket=bucket, Key="t")["TagSet"]) == {
        "project": "climate run", "stage": "raw"}
    assert alice.get_object(Bucket=bucket, Key="t")["TagCount"] == 2
    alice.put_object_tagging(Bucket=bucket, Key="t", Tagging={"TagSet": [{"Key": "stage", "Value": "clean"}]})
    assert tags(alice.get_object_tagging(Bucket=bucket, Key="t")["TagSet"]) == {"stage": "clean"}
    # Retagging leaves the bytes and their ETag as they were.
    assert alice.head_object(Bucket=bucket, Key="t")["ETag"] == f'"{md5(b"x")}"'
    source = {"Bucket": bucket, "Key": "t"}
    alice.copy_object(Bucket=bucket, Key="copied", CopySource=source)
    assert tags(alice.get_object_tagging(Bucket=bucket, Key="copied")["TagSet"]) == {"stage": "clean"}
    alice.copy_object(Bucket=bucket, Key="retagged", CopySource=source, TaggingDirective="REPLACE", Tagging="a=b")
    assert tags(alice.get_object_tagging(Bucket=bucket, Key="retagged")["TagSet"]) == {"a": "b"}
    alice.delete_object_tagging(Bucket=bucket, Key="t")
    assert alice.get_object_tagging(Bucket=bucket, Key="t")["TagSet"] == []
    assert "TagCount" not in alice.get_object(Bucket=bucket, Key="t")
    alice.put_object(Bucket=bucket, Key="copied", Body=b"new")
    assert alice.get_object_tagging(Bucket=bucket, Key="copied")["TagSet"] == []
    uid = alice.create_multipart_upload(Bucket=bucket, Key="mp", Tagging="origin=multipart")["UploadId"]
    etag = alice.upload_part(Bucket=bucket, Key="mp", UploadId=uid, PartNumber=1, Body=b"part")["ETag"]
    alice.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=uid,
                                    MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert tags(alice.get_object_tagging(Bucket=bucket, Key="mp")["TagSet"]) == {"origin": "multipart"}
    eleven = {"TagSet": [{"Key": f"k{i}", "Value": "v"} for i in range(11)]}
    twice = {"TagSet": [{"Key": "k", "Value": "1"}, {"Key": "k", "Value": "2"}]}
    for bad in (eleven, twice, {"TagSet": [{"Key": "aws:x", "Value": "v"}]}):
        with pytest.raises(ClientError) as e:
            alice.put_object_tagging(Bucket=bucket, Key="t", Tagging=bad)
        assert code(e) == "InvalidTag" and status(e) == 400
    with pytest.raises(ClientError) as e:
        alice.put_object(Bucket=bucket, Key="bad", Body=b"x", Tagging="k=1&k=2")
    assert code(e) == "InvalidTag"
    with pytest.raises(ClientError) as e:
        alice.head_object(Bucket=bucket, Key="bad")
    assert code(e) == "404"
    with pytest.raises(ClientError) as e:
        alice.get_object_tagging(Bucket=bucket, Key="missing")
    assert code(e) == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        bob.put_object_tagging(Bucket=bucket, Key="t", Tagging={"TagSet": []})
    assert code(e) == "AccessDenied"


def test_bucket_tagging(bucket):
    with pytest.raises(ClientError) as e:
        alice.get_bucket_tagging(Bucket=bucket)
    assert code(e) == "NoSuchTagSet" and status(e) == 404
    alice.put_bucket_tagging(Bucket=bucket, Tagging={"TagSet": [{"Key": "team", "Value": "hpc"},
                                                                {"Key": "cost", "Value": "42"}]})
    assert tags(alice.get_bucket_tagging(Bucket=bucket)["TagSet"]) == {"team": "hpc", "cost": "42"}
    with pytest.raises(ClientError) as e:
        bob.get_bucket_tagging(Bucket=bucket)
    assert code(e) == "AccessDenied"
    fifty_one = {"TagSet": [{"Key": f"k{i}", "Value": "v"} for i in range(51)]}
    with pytest.raises(ClientError) as e:
        alice.put_bucket_tagging(Bucket=bucket, Tagging=fifty_one)
    assert code(e) == "InvalidTag"
    assert tags(alice.get_bucket_tagging(Bucket=bucket)["TagSet"]) == {"team": "hpc", "cost": "42"}
    alice.delete_bucket_tagging(Bucket=bucket)
    with pytest.raises(ClientError) as e:
        alice.get_bucket_tagging(Bucket=bucket)
    assert code(e) == "NoSuchTagSet"


def preflight(path, headers):
    """An unsigned OPTIONS request, as a browser sends before a cross-origin
    request: its status, headers (lowercase names) and body."""
    where = urllib.parse.urlparse(URL)
    conn = http.client.HTTPConnection(where.hostname, where.port)
    conn.request("OPTIONS", path, headers=headers)
    r = conn.getresponse()
    return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()


def test_bucket_cors_and_preflight(bucket):
    """A bucket's CORS rules answer the browser's preflight and add the
    Access-Control headers to the cross-origin answers they allow; without
    a rule that allows it, the preflight is refused."""
    page = "https://notebook.example.org"
    asked = {"Origin": page, "Access-Control-Request-Method": "PUT",
             "Access-Control-Request-Headers": "content-type, x-amz-meta-run"}
    with pytest.raises(ClientError) as e:
        alice.get_bucket_cors(Bucket=bucket)
    assert code(e) == "NoSuchCORSConfiguration" and status(e) == 404
    got, _, said = preflight(f"/{bucket}/upload.csv", asked)
    assert got == 403 and "AccessForbidden" in said, said
    rules = [{"AllowedOrigins": ["https://*.example.org"], "AllowedMethods": ["PUT", "GET"],
              "AllowedHeaders": ["content-*", "x-amz-*"], "ExposeHeaders": ["ETag"], "MaxAgeSeconds": 600}]
    alice.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": rules})
    assert alice.get_bucket_cors(Bucket=bucket)["CORSRules"] == rules
    got, h, said = preflight(f"/{bucket}/upload.csv", asked)
    assert got == 200, said
    assert h["access-control-allow-origin"] == page
    assert h["access-control-allow-methods"] == "PUT, GET"
    assert h["access-control-allow-headers"] == "content-type, x-amz-meta-run"
    assert h["access-control-max-age"] == "600" and "x-amz-request-id" in h
    for refused in ({**asked, "Origin": "https://evil.example.com"},
                    {**asked, "Access-Control-Request-Method": "DELETE"},
                    {**asked, "Access-Control-Request-Headers": "authorization"}):
        got, _, said = preflight(f"/{bucket}/upload.csv", refused)
        assert got == 403 and "AccessForbidden" in said, (refused, said)
    got, _, said = preflight(f"/{bucket}/upload.csv", {"Access-Control-Request-Method": "PUT"})
    assert got == 400 and "Origin" in said, said
    # The answer to the request itself lets the page read it.
    alice.put_object(Bucket=bucket, Key="upload.csv", Body=b"a,b\n")
    url = alice.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "upload.csv"})
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Origin": page})) as r:
        assert r.headers["Access-Control-Allow-Origin"] == page
        assert r.headers["Access-Control-Expose-Headers"] == "ETag"
        assert r.read() == b"a,b\n"
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Origin": "https://evil.example.com"})) as r:
        assert r.headers["Access-Control-Allow-Origin"] is None
    # Another tenant cannot read or change the rules; bad rules are refused.
    with pytest.raises(ClientError) as e:
        bob.delete_bucket_cors(Bucket=bucket)
    assert code(e) == "AccessDenied"
    with pytest.raises(ClientError) as e:
        alice.put_bucket_cors(Bucket=bucket, CORSConfiguration={"CORSRules": [
            {"AllowedOrigins": ["*"], "AllowedMethods": ["PATCH"]}]})
    assert code(e) == "InvalidRequest" and "PATCH" in e.value.response["Error"]["Message"]
    alice.delete_bucket_cors(Bucket=bucket)
    got, _, said = preflight(f"/{bucket}/upload.csv", asked)
    assert got == 403, said


def test_get_object_attributes(bucket):
    body = data(1000, seed=70)
    alice.put_object(Bucket=bucket, Key="plain", Body=body, ChecksumAlgorithm="SHA256")
    a = alice.get_object_attributes(Bucket=bucket, Key="plain",
                                    ObjectAttributes=["ETag", "ObjectSize", "StorageClass", "Checksum"])
    # (s3s writes every ETag quoted; S3 leaves this one bare.)
    assert a["ETag"].strip('"') == md5(body) and a["ObjectSize"] == 1000 and a["StorageClass"] == "STANDARD"
    assert a["Checksum"]["ChecksumSHA256"] == base64.b64encode(hashlib.sha256(body).digest()).decode()
    assert "ObjectParts" not in a and "LastModified" in a
    only = alice.get_object_attributes(Bucket=bucket, Key="plain", ObjectAttributes=["ObjectSize"])
    assert only["ObjectSize"] == 1000 and "ETag" not in only
    parts = [data(5 << 20, seed=71), data(5 << 20, seed=72), data(10, seed=73)]
    uid, listed = upload(bucket, "parts", parts)
    alice.complete_multipart_upload(Bucket=bucket, Key="parts", UploadId=uid, MultipartUpload=listed)
    a = alice.get_object_attributes(Bucket=bucket, Key="parts", ObjectAttributes=["ObjectParts", "ObjectSize"],
                                    MaxParts=2)
    p = a["ObjectParts"]
    assert a["ObjectSize"] == (10 << 20) + 10
    assert p["TotalPartsCount"] == 3 and p["IsTruncated"] and p["NextPartNumberMarker"] == 2
    assert [(x["PartNumber"], x["Size"]) for x in p["Parts"]] == [(1, 5 << 20), (2, 5 << 20)]
    rest = alice.get_object_attributes(Bucket=bucket, Key="parts", ObjectAttributes=["ObjectParts"],
                                       PartNumberMarker=2)["ObjectParts"]
    assert [(x["PartNumber"], x["Size"]) for x in rest["Parts"]] == [(3, 10)] and not rest["IsTruncated"]
    with pytest.raises(ClientError) as e:
        alice.get_object_attributes(Bucket=bucket, Key="missing", ObjectAttributes=["ETag"])
    assert code(e) == "NoSuchKey"
    with pytest.raises(ClientError) as e:
        bob.get_object_attributes(Bucket=bucket, Key="plain", ObjectAttributes=["ETag"])
    assert code(e) == "AccessDenied"


def test_upload_part_copy(bucket):
    """Parts copied from ranges of other objects (and whole ones) make the
    object they were copied from, byte for byte; the copy's conditions and
    range are checked."""
    src = data((10 << 20) + 123, seed=80)
    alice.put_object(Bucket=bucket, Key="src", Body=src)
    small = data(777, seed=81)
    alice.put_object(Bucket=bucket, Key="small", Body=small)
    uid = alice.create_multipart_upload(Bucket=bucket, Key="joined")["UploadId"]
    source = {"Bucket": bucket, "Key": "src"}

    def part(n, **kw):
        r = alice.upload_part_copy(Bucket=bucket, Key="joined", UploadId=uid, PartNumber=n, **kw)
        return {"PartNumber": n, "ETag": r["CopyPartResult"]["ETag"]}

    first = part(1, CopySource=source, CopySourceRange=f"bytes=0-{(5 << 20) - 1}")
    assert first["ETag"] == f'"{md5(src[:5 << 20])}"'
    second = part(2, CopySource=source, CopySourceRange=f"bytes={5 << 20}-{(10 << 20) - 1}",
                  CopySourceIfMatch=f'"{md5(src)}"')
    third = part(3, CopySource={"Bucket": bucket, "Key": "small"})
    alice.complete_multipart_upload(Bucket=bucket, Key="joined", UploadId=uid,
                                    MultipartUpload={"Parts": [first, second, third]})
    assert alice.get_object(Bucket=bucket, Key="joined")["Body"].read() == src[:10 << 20] + small
    # A second upload of the same key, which no refused copy gives a part.
    uid = alice.create_multipart_upload(Bucket=bucket, Key="joined")["UploadId"]
    for kw, expected in (({"CopySourceIfMatch": '"0123"'}, "PreconditionFailed"),
                         ({"CopySourceRange": f"bytes=0-{len(src)}"}, "InvalidRange"),
                         ({"CopySourceRange": "bytes=10-5"}, "InvalidArgument"),
                         ({"CopySourceRange": "bytes=-5"}, "InvalidArgument")):
        with pytest.raises(ClientError) as e:
            part(1, CopySource=source, **kw)
        assert code(e) == expected, kw
    assert alice.list_parts(Bucket=bucket, Key="joined", UploadId=uid).get("Parts", []) == []
    with pytest.raises(ClientError) as e:
        part(1, CopySource={"Bucket": bucket, "Key": "missing"})
    assert code(e) == "NoSuchKey"
    theirs = f"bobs-parts-{RUN}"
    bob.create_bucket(Bucket=theirs)
    bob.put_object(Bucket=theirs, Key="secret", Body=b"s")
    with pytest.raises(ClientError) as e:
        part(1, CopySource={"Bucket": theirs, "Key": "secret"})
    assert code(e) == "AccessDenied"
    alice.abort_multipart_upload(Bucket=bucket, Key="joined", UploadId=uid)

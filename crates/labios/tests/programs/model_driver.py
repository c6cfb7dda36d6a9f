"""The model checker's hands outside the client API (issue 11): replays
operations read from stdin, one JSON object per line, and answers each with
one JSON line on stdout. Run by crates/labios/tests/model_drivers.rs.

    model_driver.py posix            plain POSIX calls (os.open, os.pwrite,
                                     os.pread, os.ftruncate, fallocate,
                                     os.copy_file_range, os.rename,
                                     os.unlink, os.fsync), run under
                                     `labios run` so that they become labels
    model_driver.py s3 URL KEY SECRET  boto3 against `labios s3`; a path is
                                     BUCKET/KEY, a file is an object

Requests: {"op": "write", "path", "offset", "data" (base64)}, "append" (path,
data; POSIX only), "read" (path,
offset, len), "stat", "truncate" (path, size), "rename" (from, to),
"allocate" (path, mode, offset, len; POSIX only), "copy" (from, from_offset,
to, to_offset, len; POSIX only),
"remove", "flush", "set_xattr" (path, name, value: base64 or null), "xattrs", and for S3
"bucket" (path: a bucket name, created unless it is the caller's already)
and "connect" (url: the gateway, restarted elsewhere).
Answers: {"ok": RESULT} or {"err": "ENOENT" | "EACCES" | other, "msg": TEXT}.

Objects are written whole: a write or truncate at an offset reads the
object, splices and puts it back (multipart above 5 MiB), keeping its user
metadata, which stands for extended attributes. That is what an S3 program
does to change part of an object, and every read checks what the gateway
kept byte for byte.
"""

import base64
import errno
import json
import os
import sys

PART = 5 << 20


class Refused(Exception):
    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


class Posix:
    """Every call opens, acts and closes, as separate programs would."""

    def _parents(self, path):
        os.makedirs(os.path.dirname(path), exist_ok=True)

    def write(self, path, offset, data):
        self._parents(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            done = 0
            while done < len(data):
                done += os.pwrite(fd, data[done:], offset + done)
        finally:
            os.close(fd)

    def append(self, path, data):
        self._parents(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            if os.write(fd, data) != len(data):
                raise OSError(errno.EIO, "short append")
        finally:
            os.close(fd)

    def read(self, path, offset, length):
        fd = os.open(path, os.O_RDONLY)
        try:
            out = bytearray()
            while len(out) < length:
                chunk = os.pread(fd, min(length - len(out), 8 << 20), offset + len(out))
                if not chunk:
                    break
                out += chunk
            return bytes(out)
        finally:
            os.close(fd)

    def stat(self, path):
        return os.stat(path).st_size

    def truncate(self, path, size):
        self._parents(path)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, size)
        finally:
            os.close(fd)

    def allocate(self, path, mode, offset, length):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_WRONLY)
        try:
            args = (fd, mode, ctypes.c_int64(offset), ctypes.c_int64(length))
            if libc.fallocate(*args) != 0:
                e = ctypes.get_errno()
                raise OSError(e, os.strerror(e))
        finally:
            os.close(fd)

    def copy(self, src, src_offset, dst, dst_offset, length):
        """copy_file_range until `length` bytes or the source's end."""
        fi = os.open(src, os.O_RDONLY)
        try:
            fo = os.open(dst, os.O_WRONLY)
            try:
                done = 0
                while True:
                    n = os.copy_file_range(
                        fi, fo, length - done, src_offset + done, dst_offset + done
                    )
                    done += n
                    if n == 0 or done == length:
                        return done
            finally:
                os.close(fo)
        finally:
            os.close(fi)

    def rename(self, src, dst):
        # The model's rename makes the target's missing directories, as the
        # client API's does; POSIX rename does not (ENOENT).
        self._parents(dst)
        os.rename(src, dst)

    def remove(self, path):
        os.unlink(path)

    def flush(self, path):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class S3:
    def __init__(self, url, key, secret):
        self.key, self.secret = key, secret
        self.connect(url)

    def connect(self, url):
        """A client of the gateway at `url` (again after a crash: the
        gateway restarts on another port, and the program goes on)."""
        import boto3
        from botocore.config import Config

        self.s3 = boto3.client(
            "s3",
            endpoint_url=url,
            aws_access_key_id=self.key,
            aws_secret_access_key=self.secret,
            region_name="us-east-1",
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 1},
                connect_timeout=60,
                read_timeout=120,
            ),
        )

    @staticmethod
    def _split(path):
        bucket, key = path.split("/", 1)
        return {"Bucket": bucket, "Key": key}

    def _get(self, path, missing_is_empty):
        """The whole object and its metadata."""
        try:
            got = self.s3.get_object(**self._split(path))
        except Exception as e:
            if missing_is_empty and s3_code(e) == "ENOENT":
                return b"", {}
            raise
        return got["Body"].read(), got.get("Metadata", {})

    def _put(self, path, data, meta):
        where = self._split(path)
        if len(data) <= PART:
            self.s3.put_object(Body=data, Metadata=meta, **where)
            return
        upload = self.s3.create_multipart_upload(Metadata=meta, **where)["UploadId"]
        parts = []
        for n, at in enumerate(range(0, len(data), PART), start=1):
            etag = self.s3.upload_part(
                Body=data[at : at + PART], PartNumber=n, UploadId=upload, **where
            )["ETag"]
            parts.append({"ETag": etag, "PartNumber": n})
        self.s3.complete_multipart_upload(
            UploadId=upload, MultipartUpload={"Parts": parts}, **where
        )

    def write(self, path, offset, data):
        old, meta = self._get(path, missing_is_empty=True)
        new = bytearray(old)
        # As pwrite: writing nothing does not extend the object.
        if data and len(new) < offset + len(data):
            new.extend(bytes(offset + len(data) - len(new)))
        new[offset : offset + len(data)] = data
        self._put(path, bytes(new), meta)

    def read(self, path, offset, length):
        size = self.stat(path)
        end = min(size, offset + length)
        if offset >= end:
            return b""
        got = self.s3.get_object(Range=f"bytes={offset}-{end - 1}", **self._split(path))
        return got["Body"].read()

    def stat(self, path):
        return self.s3.head_object(**self._split(path))["ContentLength"]

    def truncate(self, path, size):
        old, meta = self._get(path, missing_is_empty=True)
        self._put(path, old[:size] + bytes(max(0, size - len(old))), meta)

    def rename(self, src, dst):
        source = self._split(src)
        self.s3.copy_object(CopySource=source, **self._split(dst))
        self.s3.delete_object(**source)

    def remove(self, path):
        self.stat(path)
        self.s3.delete_object(**self._split(path))

    def flush(self, path):
        self.stat(path)

    def bucket(self, name):
        try:
            self.s3.create_bucket(Bucket=name)
        except Exception as e:
            if s3_code(e) != "BucketAlreadyOwnedByYou":
                raise

    def set_xattr(self, path, name, value):
        meta = self.s3.head_object(**self._split(path)).get("Metadata", {})
        key = name.removeprefix("user.")
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
        self.s3.copy_object(
            CopySource=self._split(path),
            Metadata=meta,
            MetadataDirective="REPLACE",
            **self._split(path),
        )

    def xattrs(self, path):
        meta = self.s3.head_object(**self._split(path)).get("Metadata", {})
        return sorted([f"user.{k}", v] for k, v in meta.items())


def s3_code(e):
    """ENOENT, EACCES or the S3 error code of a botocore ClientError."""
    response = getattr(e, "response", None)
    if response is None:
        return None
    code = response.get("Error", {}).get("Code", "")
    if code in ("404", "NoSuchKey", "NoSuchBucket"):
        return "ENOENT"
    if code in ("403", "AccessDenied"):
        return "EACCES"
    return code or str(response.get("ResponseMetadata", {}).get("HTTPStatusCode"))


def answer(backend, req):
    op, path = req["op"], req.get("path")
    if op == "write":
        backend.write(path, req["offset"], base64.b64decode(req["data"]))
    elif op == "append":
        backend.append(path, base64.b64decode(req["data"]))
    elif op == "read":
        return base64.b64encode(backend.read(path, req["offset"], req["len"])).decode()
    elif op == "stat":
        return backend.stat(path)
    elif op == "truncate":
        backend.truncate(path, req["size"])
    elif op == "rename":
        backend.rename(req["from"], req["to"])
    elif op == "allocate":
        backend.allocate(path, req["mode"], req["offset"], req["len"])
    elif op == "copy":
        return backend.copy(
            req["from"], req["from_offset"], req["to"], req["to_offset"], req["len"]
        )
    elif op == "remove":
        backend.remove(path)
    elif op == "flush":
        backend.flush(path)
    elif op == "set_xattr":
        backend.set_xattr(path, req["name"], req["value"])
    elif op == "xattrs":
        return backend.xattrs(path)
    elif op == "bucket":
        backend.bucket(path)
    elif op == "connect":
        backend.connect(req["url"])
    else:
        raise ValueError(f"unknown operation {op!r}")
    return None


def main():
    if sys.argv[1:2] == ["posix"]:
        backend = Posix()
    elif sys.argv[1:2] == ["s3"] and len(sys.argv) == 5:
        backend = S3(*sys.argv[2:5])
    else:
        sys.exit("usage: model_driver.py posix | s3 URL KEY SECRET")
    for line in sys.stdin:
        req = json.loads(line)
        try:
            reply = {"ok": answer(backend, req)}
        except OSError as e:
            reply = {"err": errno.errorcode.get(e.errno, str(e.errno)), "msg": str(e)}
        except Exception as e:  # noqa: BLE001 - every failure is an answer
            reply = {"err": s3_code(e) or type(e).__name__, "msg": str(e)}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()

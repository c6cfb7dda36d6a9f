"""An fsspec filesystem for LABIOS, registered as the ``labios`` protocol.

``labios:///runs/42/df.parquet`` names ``/runs/42/df.parquet`` in the LABIOS
namespace (``labios://runs/42/df.parquet`` is the same path: LABIOS has one
namespace per deployment, so there is no host part). Storage options are
those of :func:`labios.connect`: ``endpoint``, ``key``, ``secret``,
``config``; unset ones come from the ``LABIOS_*`` environment when the
filesystem is created.

    >>> import pandas as pd
    >>> df.to_parquet("labios:///runs/42/df.parquet")
    >>> pd.read_parquet("labios:///runs/42/df.parquet")

Files open in ``rb``, ``wb``, ``ab`` and ``xb``. Written blocks are published
as asynchronous writes while the next block fills, and ``close`` waits for
all of them. Writes land in place: fsspec transactions are not supported.
"""

import datetime
import os
import threading

from fsspec.spec import AbstractBufferedFile, AbstractFileSystem
from fsspec.utils import stringify_path

from labios._labios import Client

__all__ = ["LabiosFileSystem", "LabiosFile"]

# fsspec caches one filesystem per thread and argument set; they share one
# connection (one session runtime) per process and set of options. A forked
# child cannot use its parent's runtime threads, hence the pid.
_clients = {}
_clients_lock = threading.Lock()


def _client(options):
    key = (os.getpid(), *options)
    with _clients_lock:
        client = _clients.get(key)
        if client is None or client.closed:
            endpoint, app_key, secret, config = options
            client = Client(endpoint, key=app_key, secret=secret, config=config)
            _clients[key] = client
        return client


_IN_PLACE = "LABIOS files are written in place: fsspec transactions are not supported"


def _timestamp(ns):
    return datetime.datetime.fromtimestamp(ns / 1e9, tz=datetime.timezone.utc)


class LabiosFileSystem(AbstractFileSystem):
    protocol = "labios"
    root_marker = "/"

    def __init__(self, endpoint=None, key=None, secret=None, config=None, **kwargs):
        super().__init__(endpoint=endpoint, key=key, secret=secret, config=config, **kwargs)
        # The environment is read here, not by the client, so that the
        # shared connection is keyed by where it really goes.
        env = os.environ.get
        self.client = _client(
            (
                endpoint or env("LABIOS_ENDPOINT"),
                key or env("LABIOS_KEY"),
                secret or env("LABIOS_SECRET"),
                os.fspath(config) if config else env("LABIOS_CONFIG"),
            )
        )

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = stringify_path(path)
        for prefix in ("labios://", "labios::"):
            if path.startswith(prefix):
                path = path[len(prefix) :]
        return "/" + path.strip("/")

    @property
    def transaction(self):
        raise NotImplementedError(_IN_PLACE)

    # ---- metadata -------------------------------------------------------

    def info(self, path, **kwargs):
        return self.client.stat(self._strip_protocol(path))

    def ls(self, path, detail=True, **kwargs):
        path = self._strip_protocol(path)
        try:
            entries = self.client.listdir(path)
        except NotADirectoryError:
            entries = [self.client.stat(path)]
        return entries if detail else [e["name"] for e in entries]

    def exists(self, path, **kwargs):
        try:
            return self.client.exists(self._strip_protocol(path))
        except ValueError:  # an invalid path names nothing
            return False

    def created(self, path):
        return _timestamp(self.info(path)["ctime_ns"])

    def modified(self, path):
        return _timestamp(self.info(path)["mtime_ns"])

    # fsspec's own interface has no extended attributes; these follow
    # gcsfs's (getxattr, setxattrs), over the entry's `user.` attributes,
    # hints included (README "Hints").

    def getxattr(self, path, attr):
        """The value of attribute `attr`: text, or bytes when it is not
        UTF-8 (OSError ENODATA if none)."""
        value = self.client.getxattr(self._strip_protocol(path), attr)
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value

    def setxattrs(self, path, **kwargs):
        """Sets each attribute named by a keyword (None removes it):
        `fs.setxattrs(path, **{"user.labios.replicas": "2"})`."""
        path = self._strip_protocol(path)
        for name, value in kwargs.items():
            if value is None:
                self.client.removexattr(path, name)
            elif isinstance(value, (bytes, bytearray, memoryview)):
                self.client.setxattr(path, name, bytes(value))
            else:
                self.client.setxattr(path, name, str(value).encode())

    # ---- namespace ------------------------------------------------------

    def mkdir(self, path, create_parents=True, **kwargs):
        path = self._strip_protocol(path)
        if self.exists(path):
            raise FileExistsError(path)
        if not create_parents and not self.isdir(self._parent(path)):
            raise FileNotFoundError(self._parent(path))
        self.client.mkdir(path)

    def makedirs(self, path, exist_ok=False):
        path = self._strip_protocol(path)
        if not exist_ok and self.exists(path):
            raise FileExistsError(path)
        self.client.mkdir(path)

    def rmdir(self, path):
        path = self._strip_protocol(path)
        if self.info(path)["type"] != "directory":
            raise NotADirectoryError(path)
        self.client.remove(path)

    def _rm(self, path):
        # fsspec's rm() hands children before their directories.
        self.client.remove(self._strip_protocol(path))

    def mv(self, path1, path2, recursive=False, maxdepth=None, **kwargs):
        # A single file moves by a LABIOS rename (no data is copied); globs,
        # lists and directories take fsspec's copy-then-delete.
        if isinstance(path1, str) and isinstance(path2, str) and self.isfile(path1):
            src = self._strip_protocol(path1)
            dst = self._strip_protocol(path2)
            if path2.endswith("/") or self.isdir(dst):
                dst = dst.rstrip("/") + "/" + src.rsplit("/", 1)[-1]
            if src != dst:
                self.client.rename(src, dst)
            return
        super().mv(path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)

    def touch(self, path, truncate=True, **kwargs):
        """Creates an empty file, or empties it (``truncate``); with
        ``truncate=False`` an existing file is left as it is."""
        path = self._strip_protocol(path)
        if truncate:
            self.client.truncate(path, 0)
        else:
            self.client.create(path)

    # ---- data -----------------------------------------------------------

    def cat_file(self, path, start=None, end=None, **kwargs):
        path = self._strip_protocol(path)
        if (start or 0) < 0 or (end or 0) < 0:
            size = self.info(path)["size"]
            if start is not None and start < 0:
                start = max(0, size + start)
            if end is not None and end < 0:
                end = size + end
        start = start or 0
        length = None if end is None else max(0, end - start)
        return self.client.read(path, start, length)

    def pipe_file(self, path, value, mode="overwrite", **kwargs):
        path = self._strip_protocol(path)
        if mode == "create" and self.exists(path):
            raise FileExistsError(path)
        self.client.truncate(path, 0)
        self.client.write(path, value)

    def cp_file(self, path1, path2, **kwargs):
        src = self._strip_protocol(path1)
        dst = self._strip_protocol(path2)
        info = self.info(src)
        if info["type"] == "directory":
            self.makedirs(dst, exist_ok=True)
            return
        if src == dst:  # truncating the destination would empty the source
            return
        self.client.truncate(dst, 0)
        block = LabiosFile.DEFAULT_BLOCK_SIZE
        tickets = []
        for offset in range(0, info["size"], block):
            data = self.client.read(src, offset, block)
            tickets.append(self.client.write_async(dst, data, offset))
        self.client.wait(tickets)

    def _open(
        self,
        path,
        mode="rb",
        block_size=None,
        autocommit=True,
        cache_options=None,
        **kwargs,
    ):
        path = self._strip_protocol(path)
        if not autocommit:
            raise NotImplementedError(_IN_PLACE)
        if mode == "rb":
            info = self.info(path)
            if info["type"] == "directory":
                raise IsADirectoryError(path)
            kwargs["size"] = info["size"]
        elif mode == "xb" and self.exists(path):
            raise FileExistsError(path)
        return LabiosFile(
            self,
            path,
            mode,
            block_size=block_size,
            cache_options=cache_options,
            **kwargs,
        )


class LabiosFile(AbstractBufferedFile):
    """A buffered LABIOS file: reads fetch blocks, writes publish each full
    block asynchronously and ``close`` waits for them."""

    def __init__(self, fs, path, mode="rb", **kwargs):
        super().__init__(fs, path, mode, **kwargs)
        self._tickets = []
        if mode == "ab":
            self.loc = self._append_at = fs.size(path) if fs.exists(path) else 0

    def _initiate_upload(self):
        if self.mode == "ab":
            self.offset = self._append_at
            self.fs.client.create(self.path)
        else:
            self.fs.client.truncate(self.path, 0)

    def _upload_chunk(self, final=False):
        # The block is lent to LABIOS as it is; fsspec starts a new buffer
        # for the next one.
        if self.buffer.tell():
            block = self.buffer.getbuffer()
            self._tickets.append(self.fs.client.write_async(self.path, block, self.offset))
        if final:
            tickets, self._tickets = self._tickets, []
            self.fs.client.wait(tickets)
        return True

    def _fetch_range(self, start, end):
        return self.fs.client.read(self.path, start, end - start)

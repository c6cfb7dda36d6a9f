"""LABIOS from Python: label-based I/O with synchronous and asynchronous writes.

>>> import labios
>>> with labios.connect() as c:               # LABIOS_ENDPOINT, or endpoint="..."
...     c.write("/runs/1/x.bin", b"hello")
...     t = c.write_async("/runs/1/y.bin", numpy_array)   # zero-copy
...     t.wait()
...     c.read("/runs/1/x.bin")

``labios://`` URLs work with fsspec and the libraries built on it (pandas,
pyarrow, xarray): see :mod:`labios.fsspec`.
"""

from labios._labios import Client, Ticket

__all__ = ["Client", "Ticket", "connect"]


def connect(endpoint=None, *, key=None, secret=None, config=None):
    """A :class:`Client` for the LABIOS at ``endpoint`` (a Unix socket path or
    HOST:PORT of ``labios serve``). Unset arguments come from
    ``LABIOS_ENDPOINT``, ``LABIOS_KEY``, ``LABIOS_SECRET``, ``LABIOS_CONFIG``
    and the configuration file, as for the ``labios`` command."""
    return Client(endpoint, key=key, secret=secret, config=config)

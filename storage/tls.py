"""One TLS context per process for outgoing HTTP clients (chat models, embedding providers).

Why: ``httpx.Client()`` builds a fresh ``SSLContext`` and loads the CA bundle every time (~50 ms on
these machines), and tempomem opens a client per model call, plain-HTTP loopback calls included. The
context is built the way httpx builds its default (``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` honoured, else
certifi), once; sharing one between clients and threads is what ``ssl`` intends.
"""

from __future__ import annotations

import functools
import ssl

import httpx


@functools.cache
def client_context() -> ssl.SSLContext:
    return httpx.create_ssl_context()

"""Optional AES-GCM payload codec for the few payloads that pass through Temporal.

Memory text never enters Temporal history (workflow input is a 64-hex id, activities return digests and
counts), so this codec protects ids, counts, digests and failure categories only. Teams that run a shared
Temporal cluster may still want those opaque: with a key configured, every payload the client writes is
``binary/encrypted`` and the history shows ciphertext; the Temporal UI shows plain values only through
``tempomem codec-server``.

Wire format of one encoded payload::

    metadata: encoding=binary/encrypted, encryption-key-id=<key id>, encryption-cipher=AES-256-GCM-v1
    data:     12-byte random nonce || AES-GCM(serialised original Payload, AAD=tag||key id)

The key id is bound as associated data, so relabelling a payload with another key id fails authentication.
Decoding refuses unknown key ids and tampered data with a ``CodecError`` that names the key id (never the
key). Payloads that are not ``binary/encrypted`` pass through unchanged, so histories written before the
codec was enabled still decode.

Keys are 32 random bytes (AES-256). A key file holds them as 64 hex characters or standard base64 (a
trailing newline is fine) and must be owner-only; an environment variable may hold the same text.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from temporalio.api.common.v1 import Payload
from temporalio.converter import DataConverter, PayloadCodec

from tempomem.storage.fsio import UnsafePathError, atomic_write, read_private_file

ENCODING = b"binary/encrypted"
CIPHER = b"AES-256-GCM-v1"
META_ENCODING = "encoding"
META_KEY_ID = "encryption-key-id"
META_CIPHER = "encryption-cipher"
KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
DEFAULT_KEY_ENV = "TEMPOMEM_CODEC_KEY"
_AAD_PREFIX = b"tempomem/payload-codec/v1\x00"
_KEY_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}")
_KEY_FILE_MAX_BYTES = 4096


class CodecError(ValueError):
    """A payload cannot be decoded (unknown key id, tampered or truncated data) or a key is unusable."""


class CodecKeyError(CodecError):
    """A key file or key variable is missing, unsafe or malformed."""


def key_fingerprint(key: bytes) -> str:
    """The default key id: ``k-`` + 16 hex of a domain-separated SHA-256 of the key (safe to show)."""
    return "k-" + hashlib.sha256(b"tempomem-codec-key-id\x00" + key).hexdigest()[:16]


def _check_key(key: bytes, what: str) -> bytes:
    if not isinstance(key, bytes | bytearray) or len(key) != KEY_BYTES:
        raise CodecKeyError(f"{what} must be {KEY_BYTES} bytes (AES-256)")
    return bytes(key)


def _check_key_id(key_id: str) -> str:
    if not isinstance(key_id, str) or not _KEY_ID_RE.fullmatch(key_id):
        raise CodecKeyError(f"invalid key id {key_id!r}: expected [A-Za-z0-9][A-Za-z0-9_.:-]{{0,63}}")
    return key_id


class AesGcmCodec(PayloadCodec):
    """AES-256-GCM ``PayloadCodec``: encrypts with ``key``/``key_id``, decrypts with it or any of
    ``previous_keys`` (``{key id: key}``, for rotation)."""

    def __init__(
        self, key: bytes, key_id: str | None = None, *, previous_keys: Mapping[str, bytes] | None = None
    ) -> None:
        key = _check_key(key, "the codec key")
        self.key_id = _check_key_id(key_id if key_id is not None else key_fingerprint(key))
        self._ciphers: dict[str, AESGCM] = {}
        for old_id, old_key in dict(previous_keys or {}).items():
            self._ciphers[_check_key_id(old_id)] = AESGCM(_check_key(old_key, f"key {old_id!r}"))
        self._ciphers[self.key_id] = AESGCM(key)
        self._encryptor = self._ciphers[self.key_id]

    @property
    def key_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self._ciphers))

    @staticmethod
    def _aad(key_id: str) -> bytes:
        return _AAD_PREFIX + key_id.encode("ascii")

    # -- synchronous core (the codec server calls these from its threads) -----------------------------
    def encode_one(self, payload: Payload) -> Payload:
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._encryptor.encrypt(nonce, payload.SerializeToString(), self._aad(self.key_id))
        return Payload(
            metadata={
                META_ENCODING: ENCODING,
                META_KEY_ID: self.key_id.encode("ascii"),
                META_CIPHER: CIPHER,
            },
            data=nonce + sealed,
        )

    def decode_one(self, payload: Payload) -> Payload:
        if payload.metadata.get(META_ENCODING) != ENCODING:
            return payload  # not ours (written before the codec was enabled): pass through
        raw_id = payload.metadata.get(META_KEY_ID)
        if not raw_id:
            raise CodecError("encrypted payload carries no encryption-key-id; refusing to decode")
        try:
            key_id = raw_id.decode("ascii")
        except UnicodeDecodeError:
            raise CodecError("encrypted payload has a non-ASCII key id; refusing to decode") from None
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise CodecError(
                f"payload was encrypted with unknown key id {key_id!r}; this codec knows "
                f"{', '.join(self.key_ids)} (configure the old key to read older histories)"
            )
        version = payload.metadata.get(META_CIPHER, CIPHER)
        if version != CIPHER:
            shown = version.decode("ascii", "replace")
            raise CodecError(f"unsupported cipher {shown!r} for key id {key_id!r}")
        data = payload.data
        if len(data) < NONCE_BYTES + TAG_BYTES:
            raise CodecError(f"encrypted payload for key id {key_id!r} is truncated")
        try:
            plain = cipher.decrypt(data[:NONCE_BYTES], data[NONCE_BYTES:], self._aad(key_id))
        except InvalidTag:
            raise CodecError(
                f"encrypted payload for key id {key_id!r} failed authentication: it was tampered with, "
                f"truncated, or sealed by another key with the same id"
            ) from None
        try:
            return Payload.FromString(plain)
        except Exception as exc:  # protobuf DecodeError: authentic bytes that are not a Payload
            raise CodecError(f"decrypted payload for key id {key_id!r} is not a Payload") from exc

    def encode_many(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.encode_one(p) for p in payloads]

    def decode_many(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self.decode_one(p) for p in payloads]

    # -- PayloadCodec --------------------------------------------------------------------------------
    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self.encode_many(payloads)

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return self.decode_many(payloads)


def data_converter_for(
    key: bytes | AesGcmCodec | None, key_id: str | None = None, *, base: DataConverter | None = None
) -> DataConverter:
    """The default data converter with this codec (``None`` = the plain default converter)."""
    base = base or DataConverter.default
    if key is None:
        return base
    codec = key if isinstance(key, AesGcmCodec) else AesGcmCodec(key, key_id)
    return dataclasses.replace(base, payload_codec=codec)


# -- keys -------------------------------------------------------------------------------------------------
def parse_key_text(text: str | bytes, *, what: str = "key") -> bytes:
    """32 key bytes from 64 hex characters or standard base64 (surrounding whitespace ignored)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("ascii")
        except UnicodeDecodeError:
            raise CodecKeyError(f"{what} is not ASCII text (expected 64 hex characters or base64)") from None
    value = text.strip()
    if re.fullmatch(r"[0-9a-fA-F]{64}", value):
        return bytes.fromhex(value)
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != KEY_BYTES:
        raise CodecKeyError(f"{what} must hold {KEY_BYTES} bytes as 64 hex characters or base64")
    return raw


def load_key_file(path: Path) -> bytes:
    """Read an owner-only key file (no symlink, not readable by group/others)."""
    path = Path(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise CodecKeyError(f"codec key file {path} does not exist") from None
    if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) & 0o077:
        raise CodecKeyError(
            f"codec key file {path} has mode {stat.S_IMODE(st.st_mode):o}; make it owner-only (chmod 600)"
        )
    try:
        data = read_private_file(path, max_bytes=_KEY_FILE_MAX_BYTES)
    except UnsafePathError as exc:
        raise CodecKeyError(f"unsafe codec key file: {exc}") from None
    return parse_key_text(data, what=f"codec key file {path}")


def load_key_env(name: str, environ: Mapping[str, str] | None = None) -> bytes:
    environ = os.environ if environ is None else environ
    value = environ.get(name)
    if not value:
        raise CodecKeyError(f"environment variable {name} (codec key) is not set")
    return parse_key_text(value, what=f"environment variable {name}")


def generate_key_file(path: Path) -> str:
    """Write a fresh random key as hex, owner-only, atomically; refuse to overwrite. Returns its key id."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        raise CodecKeyError(f"{path} already exists; refusing to overwrite a key")
    key = os.urandom(KEY_BYTES)
    atomic_write(path, (key.hex() + "\n").encode("ascii"))
    return key_fingerprint(key)


def codec_from_settings(
    *,
    key_file: str | Path | None = None,
    key_env: str | None = None,
    key_id: str | None = None,
    base_dir: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> AesGcmCodec | None:
    """The codec named by settings: a key file (relative to ``base_dir``) or an environment variable.

    Neither configured = no codec (``None``). Both configured = an error: one source of truth.
    """
    if key_file and key_env:
        raise CodecKeyError("configure either codecKeyFile or codecKeyEnv, not both")
    if key_file:
        path = Path(key_file).expanduser()
        if not path.is_absolute():
            path = (base_dir or Path.cwd()) / path
        return AesGcmCodec(load_key_file(path), key_id)
    if key_env:
        return AesGcmCodec(load_key_env(key_env, environ), key_id)
    return None


def codec_from_config(temporal: Any, base_dir: Path | None = None) -> AesGcmCodec | None:
    """The codec of a ``TemporalConfig`` (``codecKeyFile`` / ``codecKeyEnv`` / ``codecKeyId``)."""
    return codec_from_settings(
        key_file=getattr(temporal, "codec_key_file", None),
        key_env=getattr(temporal, "codec_key_env", None),
        key_id=getattr(temporal, "codec_key_id", None),
        base_dir=base_dir,
    )


def data_converter_for_config(temporal: Any, base_dir: Path | None = None) -> DataConverter:
    """What ``Client.connect(..., data_converter=...)`` should get for this config."""
    return data_converter_for(codec_from_config(temporal, base_dir))

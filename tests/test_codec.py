"""AES-GCM payload codec, key loading, the codec server over real HTTP, and a real workflow on the dev
server whose history holds ciphertext while the codec client still reads the result."""

from __future__ import annotations

import asyncio
import base64
import http.client
import json
import os
import uuid
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from google.protobuf import json_format
from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload, Payloads
from temporalio.client import Client
from temporalio.converter import DataConverter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from tempomem import codec as codec_mod
from tempomem.codec import AesGcmCodec, CodecError, CodecKeyError, data_converter_for
from tempomem.codec_server import CodecServer

KEY = bytes(range(32))
OTHER = bytes(range(1, 33))
SECRET = "store-7f3a intake 9c1e attempts=3"


def plain(value: Any) -> Payload:
    return DataConverter.default.payload_converter.to_payloads([value])[0]


# -- the codec -------------------------------------------------------------------------------------------
def test_roundtrip_metadata_and_ciphertext() -> None:
    codec = AesGcmCodec(KEY, "team-key-1")
    original = plain(SECRET)
    enc = codec.encode_many([original, original])
    assert enc[0].metadata["encoding"] == b"binary/encrypted"
    assert enc[0].metadata["encryption-key-id"] == b"team-key-1"
    assert SECRET.encode() not in enc[0].data and b"json/plain" not in enc[0].data
    assert enc[0].data != enc[1].data  # fresh nonce per payload
    assert codec.decode_many(enc) == [original, original]
    assert asyncio.run(codec.decode(asyncio.run(codec.encode([original])))) == [original]


def test_default_key_id_is_a_fingerprint_not_the_key() -> None:
    codec = AesGcmCodec(KEY)
    assert codec.key_id.startswith("k-") and KEY.hex()[:16] not in codec.key_id
    assert AesGcmCodec(OTHER).key_id != codec.key_id


def test_decode_refuses_unknown_key_tampering_and_relabelling() -> None:
    codec = AesGcmCodec(KEY, "k1")
    enc = codec.encode_one(plain(SECRET))

    with pytest.raises(CodecError, match="unknown key id 'k1'"):
        AesGcmCodec(OTHER, "k2").decode_one(enc)

    tampered = Payload()
    tampered.CopyFrom(enc)
    tampered.data = enc.data[:-1] + bytes([enc.data[-1] ^ 1])
    with pytest.raises(CodecError, match="failed authentication"):
        codec.decode_one(tampered)

    # Same key under two ids: relabelling the key id breaks the associated data, so it still fails.
    both = AesGcmCodec(KEY, "k1", previous_keys={"k0": KEY})
    relabelled = Payload()
    relabelled.CopyFrom(enc)
    relabelled.metadata["encryption-key-id"] = b"k0"
    with pytest.raises(CodecError, match="failed authentication"):
        both.decode_one(relabelled)

    truncated = Payload(metadata=dict(enc.metadata), data=enc.data[:10])
    with pytest.raises(CodecError, match="truncated"):
        codec.decode_one(truncated)
    no_id = Payload(metadata={"encoding": b"binary/encrypted"}, data=enc.data)
    with pytest.raises(CodecError, match="no encryption-key-id"):
        codec.decode_one(no_id)

    # Payloads that were never encrypted pass through (histories from before the codec was enabled).
    assert codec.decode_one(plain(SECRET)) == plain(SECRET)


def test_rotation_decodes_old_key_and_encodes_with_new() -> None:
    old = AesGcmCodec(KEY, "2025")
    enc_old = old.encode_one(plain(1))
    rotated = AesGcmCodec(OTHER, "2026", previous_keys={"2025": KEY})
    assert rotated.decode_one(enc_old) == plain(1)
    assert rotated.encode_one(plain(1)).metadata["encryption-key-id"] == b"2026"
    assert rotated.key_ids == ("2025", "2026")


@pytest.mark.parametrize("bad", [b"short", b"x" * 33, "not bytes"])
def test_bad_keys_and_key_ids_are_refused(bad: Any) -> None:
    with pytest.raises(CodecKeyError):
        AesGcmCodec(bad, "k")
    with pytest.raises(CodecKeyError, match="invalid key id"):
        AesGcmCodec(KEY, "has space")


def test_data_converter_for() -> None:
    assert data_converter_for(None) is DataConverter.default
    conv = data_converter_for(KEY, "k")
    assert isinstance(conv.payload_codec, AesGcmCodec) and conv.payload_codec.key_id == "k"
    assert conv.payload_converter_class is DataConverter.default.payload_converter_class


# -- keys ------------------------------------------------------------------------------------------------
def test_key_files_and_env(tmp_path: Path) -> None:
    hex_file = tmp_path / "hex.key"
    hex_file.write_text(KEY.hex() + "\n")
    os.chmod(hex_file, 0o600)
    b64_file = tmp_path / "b64.key"
    b64_file.write_text(base64.b64encode(KEY).decode())
    os.chmod(b64_file, 0o600)
    assert codec_mod.load_key_file(hex_file) == KEY == codec_mod.load_key_file(b64_file)

    os.chmod(hex_file, 0o644)
    with pytest.raises(CodecKeyError, match="owner-only"):
        codec_mod.load_key_file(hex_file)
    os.chmod(hex_file, 0o600)
    link = tmp_path / "link.key"
    link.symlink_to(hex_file)
    with pytest.raises(CodecKeyError, match=r"unsafe|symlink"):
        codec_mod.load_key_file(link)
    bad = tmp_path / "bad.key"
    bad.write_text("zz" * 32)
    os.chmod(bad, 0o600)
    with pytest.raises(CodecKeyError, match="64 hex characters or base64"):
        codec_mod.load_key_file(bad)
    with pytest.raises(CodecKeyError, match="does not exist"):
        codec_mod.load_key_file(tmp_path / "missing.key")

    assert codec_mod.load_key_env("K", {"K": KEY.hex()}) == KEY
    with pytest.raises(CodecKeyError, match="not set"):
        codec_mod.load_key_env("K", {})

    new = tmp_path / "new.key"
    key_id = codec_mod.generate_key_file(new)
    assert new.stat().st_mode & 0o777 == 0o600
    assert codec_mod.key_fingerprint(codec_mod.load_key_file(new)) == key_id
    with pytest.raises(CodecKeyError, match="refusing to overwrite"):
        codec_mod.generate_key_file(new)


def test_codec_from_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "k").write_text(KEY.hex())
    os.chmod(tmp_path / "k", 0o600)
    cfg = SimpleNamespace(codec_key_file="k", codec_key_env=None, codec_key_id="team")
    codec = codec_mod.codec_from_config(cfg, base_dir=tmp_path)  # relative to the config's folder
    assert codec is not None and codec.key_id == "team"
    monkeypatch.setenv("MY_CODEC_KEY", KEY.hex())
    env_cfg = SimpleNamespace(codec_key_file=None, codec_key_env="MY_CODEC_KEY")
    assert codec_mod.codec_from_config(env_cfg).key_id == codec_mod.key_fingerprint(KEY)  # type: ignore[union-attr]
    assert codec_mod.codec_from_config(SimpleNamespace()) is None  # a config without the keys: no codec
    assert codec_mod.data_converter_for_config(SimpleNamespace()) is DataConverter.default
    with pytest.raises(CodecKeyError, match="not both"):
        codec_mod.codec_from_config(
            SimpleNamespace(codec_key_file="k", codec_key_env="MY_CODEC_KEY"), tmp_path
        )


# -- the codec server over real HTTP ------------------------------------------------------------------------
UI = "http://localhost:8233"


def request(
    server: CodecServer,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def payloads_json(payloads: list[Payload]) -> bytes:
    return json_format.MessageToJson(Payloads(payloads=payloads)).encode()


def test_codec_server_encode_decode_and_cors() -> None:
    codec = AesGcmCodec(KEY, "k1")
    with CodecServer(codec, port=0, origins=[UI]) as server:
        # CORS preflight from the UI origin.
        status, headers, _ = request(
            server,
            "OPTIONS",
            "/decode",
            headers={
                "Origin": UI,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace",
            },
        )
        assert status == 204
        assert headers["access-control-allow-origin"] == UI
        assert "POST" in headers["access-control-allow-methods"]
        assert "x-namespace" in headers["access-control-allow-headers"]
        # Another origin gets no CORS grant.
        status, headers, _ = request(server, "OPTIONS", "/decode", headers={"Origin": "http://evil.example"})
        assert status == 403 and "access-control-allow-origin" not in headers

        original = [plain(SECRET), plain({"n": 3})]
        json_headers = {"Content-Type": "application/json", "Origin": UI, "X-Namespace": "default"}
        status, headers, body = request(server, "POST", "/encode", payloads_json(original), json_headers)
        assert status == 200 and headers["access-control-allow-origin"] == UI
        wire = json.loads(body)
        assert base64.b64decode(wire["payloads"][0]["metadata"]["encoding"]) == b"binary/encrypted"
        assert SECRET.encode() not in body and SECRET.encode() not in base64.b64decode(
            wire["payloads"][0]["data"]
        )

        status, _, body = request(server, "POST", "/decode", body, json_headers)
        assert status == 200
        assert list(json_format.Parse(body, Payloads()).payloads) == original

        # Errors are explicit, never a silent pass-through of ciphertext.
        foreign = payloads_json([AesGcmCodec(OTHER, "k9").encode_one(plain(1))])
        status, _, body = request(server, "POST", "/decode", foreign, json_headers)
        assert status == 400 and "unknown key id 'k9'" in json.loads(body)["error"]
        status, _, body = request(server, "POST", "/decode", b"{not json", json_headers)
        assert status == 400 and "Payloads JSON" in json.loads(body)["error"]
        assert request(server, "POST", "/other", b"{}", json_headers)[0] == 404
        assert request(server, "GET", "/decode")[0] == 405
        assert request(server, "POST", "/decode", b"{}", {"Origin": "http://evil.example"})[0] == 403


def test_codec_server_token_and_namespace() -> None:
    codec = AesGcmCodec(KEY, "k1")
    with CodecServer(codec, port=0, origins=[UI], auth_token="s3cret", namespace="memory") as server:
        body = payloads_json([plain(1)])
        assert request(server, "POST", "/encode", body, {"X-Namespace": "memory"})[0] == 401
        auth = {"Authorization": "Bearer s3cret"}
        assert request(server, "POST", "/encode", body, {**auth, "X-Namespace": "other"})[0] == 403
        assert request(server, "POST", "/encode", body, {**auth, "X-Namespace": "memory"})[0] == 200


# -- a real workflow on the dev server ----------------------------------------------------------------------
@activity.defn(name="codec_test_shout")
async def shout(text: str) -> str:
    return text.upper()


@workflow.defn(name="CodecTestWorkflow", sandboxed=False)
class CodecTestWorkflow:
    @workflow.run
    async def run(self, text: str) -> str:
        loud = await workflow.execute_activity(shout, text, start_to_close_timeout=timedelta(seconds=10))
        return f"{loud}!"


async def test_history_is_encrypted_yet_the_codec_client_reads_the_result(
    temporal_env: WorkflowEnvironment, client: Client
) -> None:
    target = temporal_env.client.service_client.config.target_host
    codec = AesGcmCodec(KEY, "dev-key")
    enc_client = await Client.connect(
        target, namespace=client.namespace, data_converter=data_converter_for(codec)
    )
    queue = f"codec-{uuid.uuid4().hex[:8]}"
    wf_id = f"codec-test-{uuid.uuid4().hex[:8]}"
    async with Worker(enc_client, task_queue=queue, workflows=[CodecTestWorkflow], activities=[shout]):
        handle = await enc_client.start_workflow(CodecTestWorkflow.run, SECRET, id=wf_id, task_queue=queue)
        assert await handle.result() == SECRET.upper() + "!"

    history = await handle.fetch_history()
    raw = history.to_json()
    assert SECRET not in raw and SECRET.upper() not in raw  # neither input, activity data nor result
    found: list[Payload] = []
    for event in history.events:
        for attr in (
            event.workflow_execution_started_event_attributes.input,
            event.activity_task_scheduled_event_attributes.input,
            event.activity_task_completed_event_attributes.result,
            event.workflow_execution_completed_event_attributes.result,
        ):
            found.extend(attr.payloads)
    assert len(found) == 4
    assert all(p.metadata["encoding"] == b"binary/encrypted" for p in found)
    assert all(p.metadata["encryption-key-id"] == b"dev-key" for p in found)

    # Without the codec (the plain session client) the result cannot be read; with a wrong key, a clear error.
    with pytest.raises(Exception, match=r"binary/encrypted|[Ee]ncoding"):
        await client.get_workflow_handle(wf_id).result()
    wrong = await Client.connect(
        target, namespace=client.namespace, data_converter=data_converter_for(AesGcmCodec(OTHER, "other"))
    )
    with pytest.raises(CodecError, match="unknown key id 'dev-key'"):
        await wrong.get_workflow_handle(wf_id).result()

    # What the Temporal UI does with that history: POST the payloads to the codec server and show the answer.
    with CodecServer(codec, port=0, origins=[UI]) as server:
        status, _, body = await asyncio.to_thread(
            request, server, "POST", "/decode", payloads_json(found), {"X-Namespace": client.namespace}
        )
    assert status == 200
    values = [
        DataConverter.default.payload_converter.from_payload(p)
        for p in json_format.Parse(body, Payloads()).payloads
    ]
    assert values == [SECRET, SECRET, SECRET.upper(), SECRET.upper() + "!"]


# -- the commands ------------------------------------------------------------------------------------------
RUN_CODEC_COMMANDS = """
import argparse, sys
from tempomem.cli import common as cli_common
from tempomem.cli.archive import register_codec
parser = argparse.ArgumentParser()
parser.add_argument("--config")
register_codec(parser.add_subparsers(dest="command", required=True), cli_common.load_args_config)
args = parser.parse_args(sys.argv[1:])
sys.exit(args.func(args))
"""


@pytest.mark.slow  # a process, or thousands of cases: not in the quick subset
def test_codec_commands_keygen_and_server_process(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys

    def start(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-c", RUN_CODEC_COMMANDS, *argv],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )

    keygen = start("codec-keygen", "team.key")
    assert keygen.wait(timeout=60) == 0, keygen.stderr.read()  # type: ignore[union-attr]
    key = codec_mod.load_key_file(tmp_path / "team.key")
    again = start("codec-keygen", "team.key")
    assert again.wait(timeout=60) == 1 and "refusing to overwrite" in again.stderr.read()  # type: ignore[union-attr]

    none = start("codec-server", "--port", "0")  # no key configured anywhere: a clear refusal
    assert none.wait(timeout=60) == 1 and "no codec key" in none.stderr.read()  # type: ignore[union-attr]

    proc = start("codec-server", "--port", "0", "--key-env", "TEAM_KEY", env={"TEAM_KEY": key.hex()})
    try:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("codec server on http://127.0.0.1:"), line
        port = int(line.split("http://127.0.0.1:")[1].split()[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("POST", "/encode", body=payloads_json([plain(SECRET)]))
        resp = conn.getresponse()
        assert resp.status == 200
        encoded = json_format.Parse(resp.read(), Payloads()).payloads[0]
        conn.close()
        assert AesGcmCodec(key).decode_one(encoded) == plain(SECRET)  # same key → same default key id
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0  # SIGTERM (docker stop) is an orderly exit
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

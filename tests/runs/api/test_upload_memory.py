"""An upload is never held whole in the web process (issue 25, "a 200 MB POST /api/traces grew
the gunicorn worker to 2.19 GB, about 10 bytes of memory per byte uploaded"): a real gunicorn
takes 80 MB bodies, raw (with curl's default form Content-Type) and multipart, and its
worker's peak memory grows by a few tens of MB at most, while every byte is kept."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from runs.models import Trace
from runs.services import raw
from tests.runs.api.test_otlp_http import gunicorn
from tests.runs.services.test_worker import worker_env

MB = 1024 * 1024
BODY = 80 * MB
GROWTH = 40 * MB  # what the worker's peak may grow by for one such upload


def native_jsonl(size: int) -> bytes:
    """A native trace of about `size` bytes: distinct calls with some text in each result."""
    rng = random.Random(7)
    words = [f"w{n}" for n in range(5000)]
    lines, total, n = [], 0, 0
    while total < size:
        text = " ".join(rng.choices(words, k=40))
        line = json.dumps({"type": "tool_call", "tool": "search", "args": {"q": f"query {n}"},
                           "result": text}) + "\n"  # fmt: skip
        lines.append(line)
        total += len(line)
        n += 1
    return "".join(lines).encode()


def peak_rss(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for {pid}")


def worker_pid(port: int) -> int:
    """The pid of the gunicorn worker serving `port` (forked from its master, same command)."""
    serving = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            command = (proc / "cmdline").read_bytes()
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if b"gunicorn" in command and f"127.0.0.1:{port}".encode() in command:
            serving[int(proc.name)] = ppid
    (worker,) = [pid for pid, ppid in serving.items() if ppid in serving]
    return worker


def post(port: int, path: str, body: bytes | Iterator[bytes], length: int, key: str, **headers):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Authorization": f"Bearer {key}", "Content-Length": str(length), **headers}
    connection.request("POST", path, body=body, headers=headers)
    response = connection.getresponse()
    answer = response.status, response.read()
    connection.close()
    return answer


def multipart(data: bytes, name: str) -> tuple[list[bytes], int]:
    boundary = "loopboard-memory-test"
    head = (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
            "Content-Type: application/octet-stream\r\n\r\n").encode()  # fmt: skip
    tail = f"\r\n--{boundary}--\r\n".encode()
    parts = [head, data, tail]
    return parts, sum(map(len, parts))


@pytest.fixture(scope="module")
def server(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[tuple[int, int, Path]]:
    """A one-worker gunicorn on the test database; yields (port, its worker's pid, its log)."""
    log_path = tmp_path_factory.mktemp("gunicorn") / "gunicorn.log"
    with django_db_blocker.unblock():
        env = worker_env(LOOPBOARD_MAX_UPLOAD_BYTES=str(BODY + MB))
    with gunicorn(log_path, env) as port:
        yield port, worker_pid(port), log_path


def stored_digest(trace: Trace) -> str:
    digest = hashlib.sha256()
    for chunk in raw.chunks(trace):
        digest.update(chunk)
    return digest.hexdigest()


@pytest.mark.django_db(transaction=True)
def test_a_big_upload_is_streamed_through_the_web_worker(server, key, project):
    port, pid, _ = server
    small = native_jsonl(10_000)  # the worker's code and connections, before the big ones
    status, answer = post(port, "/api/traces?name=warm.jsonl", small, len(small), key)
    assert status == 202, answer

    data = native_jsonl(BODY)
    before = peak_rss(pid)
    form = {"Content-Type": "application/x-www-form-urlencoded"}  # what curl --data-binary sends
    status, answer = post(port, "/api/traces?name=big.jsonl", data, len(data), key, **form)
    assert status == 202, answer
    assert peak_rss(pid) - before < GROWTH, f"grew {(peak_rss(pid) - before) / MB:.0f} MB"
    trace = Trace.objects.defer("raw").get(pk=json.loads(answer)["trace_id"])
    assert trace.size == len(data) and trace.raw_encoding == "zstd"
    assert stored_digest(trace) == trace.sha256 == hashlib.sha256(data).hexdigest()

    noise = os.urandom(BODY // 2)  # compresses to nothing less: stored as received, in slices
    parts, length = multipart(noise, "noise.bin.gz")
    before = peak_rss(pid)
    status, answer = post(port, "/api/traces", iter(parts), length, key,
                          **{"Content-Type": "multipart/form-data; boundary=loopboard-memory-test"})  # fmt: skip
    assert status == 202, answer
    assert peak_rss(pid) - before < GROWTH, f"grew {(peak_rss(pid) - before) / MB:.0f} MB"
    trace = Trace.objects.defer("raw").get(pk=json.loads(answer)["trace_id"])
    assert trace.size == len(noise) and trace.raw_encoding == "" and trace.name == "noise.bin.gz"
    assert stored_digest(trace) == hashlib.sha256(noise).hexdigest()

    before = peak_rss(pid)
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    connection.request(
        "GET", f"/api/traces/{trace.pk}/raw", headers={"Authorization": f"Bearer {key}"}
    )
    response = connection.getresponse()
    digest = hashlib.sha256()
    while chunk := response.read(MB):
        digest.update(chunk)
    connection.close()
    assert response.status == 200 and digest.hexdigest() == hashlib.sha256(noise).hexdigest()
    assert peak_rss(pid) - before < GROWTH, "a download is streamed too"


@pytest.mark.django_db(transaction=True)
def test_a_download_that_fails_partway_ends_short_and_is_logged(server, key, project):
    """Issue 25 part 4: a streamed answer that fails partway ends in a way clients detect.
    The stored bytes are damaged past their first megabytes, so unpacking fails mid-stream."""
    port, _, log_path = server
    data = native_jsonl(3 * MB)
    status, answer = post(port, "/api/traces?name=damaged.jsonl", data, len(data), key)
    assert status == 202, answer
    trace = Trace.objects.get(pk=json.loads(answer)["trace_id"])
    packed = bytearray(trace.raw)
    at = len(packed) * 4 // 5
    packed[at : at + 64] = os.urandom(64)
    Trace.objects.filter(pk=trace.pk).update(raw=bytes(packed))

    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.request(
        "GET", f"/api/traces/{trace.pk}/raw", headers={"Authorization": f"Bearer {key}"}
    )
    response = connection.getresponse()
    assert response.status == 200 and response.getheader("Content-Length") == str(len(data))
    with pytest.raises(http.client.IncompleteRead) as short:
        response.read()
    connection.close()
    assert 0 < len(short.value.partial) < len(data)
    assert data.startswith(short.value.partial)  # what came was right, and then it stopped
    assert f"download of trace {trace.pk} failed after" in log_path.read_text()

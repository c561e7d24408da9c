"""A small client for loopboard's live-run API (`/api/live/runs/...`), standard library only.

Hooks start a fresh Python process for every tool call (twice per call: before and after),
so this module imports only `json`, `os` and the C socket module `_socket` when it is
loaded: no httpx, no urllib, no Django, no `typing`, `dataclasses`, `pathlib` or even
`socket` (whose enum classes alone cost 5-20 ms at import; `socket` and `ssl` are imported
for an https URL, `tomllib` for a hand-edited config file). Every failure (refused, timed out, an
HTTP error, a body that is not JSON) raises `LiveError`, so a caller can fail open with one
`except`.

Each request has one overall deadline (`timeout` seconds from the start of the request to
the last byte of the answer), not a timeout per socket read: a server that trickles its
answer a byte at a time is cut off at the deadline like one that never answers.

Where the server and the key come from: the environment (`LOOPBOARD_URL`,
`LOOPBOARD_API_KEY`, or `LOOPBOARD_KEY` as `loopboard push` reads it) wins over the config
file `loopboard hook install` writes (`$XDG_CONFIG_HOME/loopboard/hook.toml`, by default
`~/.config/loopboard/hook.toml`), never a file in the repository.
"""

from __future__ import annotations

import _socket
import json
import os
import time

TYPE_CHECKING = False  # `typing` itself is not imported on the hook's path
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 1.5
MAX_ANSWER_BYTES = 16 * 1024 * 1024  # an answer larger than this is not loopboard's
# RFC 3986 unreserved characters: what a path segment keeps as it is
_UNRESERVED = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")


class LiveError(Exception):
    """The live API could not be reached in time, or did not answer as it should; `status`
    is the HTTP status when there was an answer."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def config_folder() -> str:
    """Return loopboard's per-user config folder (outside any repository), as a string."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "loopboard")


def config_dir() -> Path:
    """Return loopboard's per-user config folder as a Path."""
    from pathlib import Path

    return Path(config_folder())


def config_path() -> Path:
    return config_dir() / "hook.toml"


def read_config() -> dict[str, Any]:
    """Return the config file's values, or {} when there is none or it cannot be read.

    The file `loopboard hook install` writes holds only `name = "JSON string"` lines, read
    here without a TOML parser; a file edited into other TOML is read with `tomllib`."""
    try:
        with open(os.path.join(config_folder(), "hook.toml"), "rb") as handle:
            raw = handle.read()
    except OSError:
        return {}
    values: dict[str, Any] = {}
    try:
        for line in raw.decode("utf-8").splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, equals, value = line.partition("=")
            parsed = json.loads(value) if equals and name.strip().isidentifier() else None
            if not isinstance(parsed, str):
                raise ValueError(line)
            values[name.strip()] = parsed
        return values
    except ValueError:  # not our simple lines (or not UTF-8): read it as the TOML it may be
        import tomllib

        try:
            return tomllib.loads(raw.decode("utf-8", "replace"))
        except tomllib.TOMLDecodeError:
            return {}


def quote_segment(text: str) -> str:
    """Percent-encode `text` for one URL path segment (every byte but the unreserved)."""
    return "".join(chr(b) if b in _UNRESERVED else f"%{b:02X}" for b in text.encode("utf-8"))


class LiveClient:
    """The live-run endpoints of one loopboard, with one project's key; `timeout` is each
    request's overall deadline in seconds."""

    __slots__ = ("url", "key", "timeout", "url_from")

    def __init__(
        self,
        url: str,
        key: str,
        timeout: float = DEFAULT_TIMEOUT,
        url_from: str = "the caller",  # where the URL came from (what `hook status` says)
    ) -> None:
        self.url, self.key, self.timeout, self.url_from = url, key, timeout, url_from

    def __repr__(self) -> str:
        return f"LiveClient({self.url!r}, key={self.key[:7]!r}…, timeout={self.timeout})"

    @classmethod
    def from_config(cls) -> LiveClient:
        """Build a client from the environment, then the config file, then the defaults."""
        config = read_config()
        if os.environ.get("LOOPBOARD_URL"):
            url, url_from = os.environ["LOOPBOARD_URL"], "LOOPBOARD_URL"
        elif config.get("url"):
            url, url_from = config["url"], os.path.join(config_folder(), "hook.toml")
        else:
            url, url_from = DEFAULT_URL, "the default"
        key = (
            os.environ.get("LOOPBOARD_API_KEY")
            or os.environ.get("LOOPBOARD_KEY")
            or config.get("key")
            or ""
        )
        try:
            timeout = float(os.environ.get("LOOPBOARD_HOOK_TIMEOUT") or DEFAULT_TIMEOUT)
        except ValueError:
            timeout = DEFAULT_TIMEOUT
        if not timeout > 0:  # also NaN
            timeout = DEFAULT_TIMEOUT
        return cls(url=str(url).rstrip("/"), key=str(key), timeout=timeout, url_from=url_from)

    def open(
        self, external_id: str, name: str = "", metadata: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Open the live run of this session (or return it when it is open already)."""
        body: dict[str, Any] = {"external_id": external_id}
        if name:
            body["name"] = name
        if metadata:
            body["metadata"] = metadata
        return self.request("POST", "/api/live/runs", body)

    def append(self, external_id: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
        """Append steps; a step whose `id` the run already has is not added again."""
        return self.request("POST", f"{self.run_path(external_id)}/steps", {"steps": steps})

    def check(self, external_id: str, tool: str, args: Any) -> dict[str, Any]:
        """Ask whether this next call would be a loop: {verdict, findings, message}."""
        return self.request(
            "POST", f"{self.run_path(external_id)}/check", {"tool": tool, "args": args}
        )

    def end(self, external_id: str) -> dict[str, Any]:
        return self.request("POST", f"{self.run_path(external_id)}/end", {})

    def get(self, external_id: str) -> dict[str, Any]:
        return self.request("GET", self.run_path(external_id))

    @staticmethod
    def run_path(external_id: str) -> str:
        return "/api/live/runs/" + quote_segment(external_id)

    def request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """Send one request and return the JSON answer; raise LiveError on any failure,
        at the latest `timeout` seconds after the call."""
        if not self.key:
            raise LiveError("no API key: set LOOPBOARD_API_KEY or run `loopboard hook install`")
        data = b"" if body is None else json.dumps(body).encode()
        status, reason, payload = _exchange(
            self.url, method, path, data, {"Authorization": f"Bearer {self.key}"}, self.timeout
        )
        if status >= 400:
            raise LiveError(f"{self.url} answered {status}: {_detail(payload, reason)}", status)
        try:
            answer = json.loads(payload)
        except ValueError as exc:
            raise LiveError(f"{self.url} answered something that is not JSON") from exc
        if not isinstance(answer, dict):
            raise LiveError(f"{self.url} answered {type(answer).__name__}, not an object")
        return answer


def _split_url(url: str) -> tuple[str, str, int, str]:
    """Return (scheme, host, port, path prefix) of an http(s) base URL; LiveError if bad."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise LiveError(f"{url} unreachable: not an http:// or https:// URL")
    authority, slash, prefix = rest.partition("/")
    authority = authority.rpartition("@")[2]
    host, port_text = authority, ""
    if authority.startswith("["):  # [IPv6]:port
        host, _, after = authority[1:].partition("]")
        port_text = after.removeprefix(":")
    elif ":" in authority:
        host, _, port_text = authority.rpartition(":")
    try:
        port = int(port_text) if port_text else (443 if scheme == "https" else 80)
    except ValueError:
        raise LiveError(f"{url} unreachable: the port {port_text!r} is not a number") from None
    if not host or not 0 < port < 65536:
        raise LiveError(f"{url} unreachable: no host, or a port out of range")
    return scheme, host, port, ("/" + prefix.rstrip("/")) if slash and prefix.strip("/") else ""


def _exchange(
    url: str, method: str, path: str, data: bytes, headers: dict[str, str], timeout: float
) -> tuple[int, str, bytes]:
    """One HTTP/1.1 request on a connection of its own (closed after it), all of it within
    `timeout` seconds: each connect, send and read waits only what is left of the deadline.
    Returns (status, reason, body); raises LiveError when unreachable or out of time."""
    deadline = time.monotonic() + timeout
    scheme, host, port, prefix = _split_url(url)

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("timed out")
        return remaining

    lines = [
        f"{method} {prefix}{path} HTTP/1.1",
        f"Host: {host if ':' not in host else f'[{host}]'}:{port}",
        "Connection: close",
        "Accept: application/json",
        "Content-Type: application/json",
        f"Content-Length: {len(data)}",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
    sock: Any = None
    try:
        sock = _connect(host, port, left)
        if scheme == "https":
            import socket
            import ssl

            sock = socket.socket(fileno=sock.detach())
            sock.settimeout(left())
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        sock.settimeout(left())
        sock.sendall(head + data)
        reader = _Reader(sock, left)
        status_line = reader.line()
        parts = status_line.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise LiveError(f"{url} answered something that is not HTTP")
        status, reason = int(parts[1]), parts[2] if len(parts) > 2 else ""
        fields: dict[str, str] = {}
        while line := reader.line():
            name, _, value = line.partition(":")
            fields[name.strip().lower()] = value.strip()
        if "chunked" in fields.get("transfer-encoding", "").lower():
            body = reader.chunked()
        elif fields.get("content-length", "").isdigit():
            body = reader.exactly(int(fields["content-length"]))
        else:
            body = reader.rest()
        return status, reason, body
    except LiveError:
        raise
    except (OSError, ValueError) as exc:  # refused, timed out, reset, a bad name
        raise LiveError(f"{url} unreachable: {exc or type(exc).__name__}") from exc
    finally:
        if sock is not None:
            sock.close()


def _connect(host: str, port: int, left: Callable[[], float]) -> Any:
    """Connect to the first address of `host` that accepts, within the deadline (what
    `socket.create_connection` does, on the C socket module)."""
    error: OSError | None = None
    for family, kind, proto, _, address in _socket.getaddrinfo(host, port, 0, _socket.SOCK_STREAM):
        sock = _socket.socket(family, kind, proto)
        try:
            sock.settimeout(left())
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
            if isinstance(exc, TimeoutError):
                break
    raise error or OSError(f"no address for {host}")


class _Reader:
    """Reads an HTTP answer from a socket, each read bounded by what is left of the
    deadline (`left()` raises TimeoutError once it has passed)."""

    def __init__(self, sock: Any, left: Callable[[], float]) -> None:
        self.sock, self.left, self.buffer, self.total = sock, left, b"", 0

    def _more(self) -> bool:
        self.sock.settimeout(self.left())
        chunk = self.sock.recv(65536)
        self.total += len(chunk)
        if self.total > MAX_ANSWER_BYTES:
            raise ValueError(f"an answer over {MAX_ANSWER_BYTES} bytes")
        self.buffer += chunk
        return bool(chunk)

    def line(self) -> str:
        while b"\r\n" not in self.buffer:
            if len(self.buffer) > 65536:
                raise ValueError("a header line over 64 KiB")
            if not self._more():
                raise ValueError("the connection closed in the answer's head")
        line, _, self.buffer = self.buffer.partition(b"\r\n")
        return line.decode("latin-1")

    def exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            if not self._more():
                raise ValueError("the connection closed in the answer's body")
        data, self.buffer = self.buffer[:size], self.buffer[size:]
        return data

    def rest(self) -> bytes:
        while self._more():
            pass
        data, self.buffer = self.buffer, b""
        return data

    def chunked(self) -> bytes:
        body = b""
        while True:
            size = int(self.line().partition(";")[0].strip() or "x", 16)
            if size == 0:
                while self.line():  # trailers
                    pass
                return body
            body += self.exactly(size)
            self.exactly(2)  # the CRLF after each chunk


def _detail(payload: bytes, reason: str) -> str:
    try:
        return str(json.loads(payload).get("detail", ""))[:200]
    except (ValueError, AttributeError):
        return reason or ""

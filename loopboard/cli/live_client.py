"""A small client for loopboard's live-run API (`/api/live/runs/...`), standard library only.

Hooks start a fresh Python process for every tool call, so this module imports nothing
heavy (no httpx, no Django). Every failure (refused, timed out, an HTTP error, a body that
is not JSON) raises `LiveError`, so a caller can fail open with one `except`.

Where the server and the key come from: the environment (`LOOPBOARD_URL`,
`LOOPBOARD_API_KEY`, or `LOOPBOARD_KEY` as `loopboard push` reads it) wins over the config
file `loopboard hook install` writes (`$XDG_CONFIG_HOME/loopboard/hook.toml`, by default
`~/.config/loopboard/hook.toml`), never a file in the repository.
"""

from __future__ import annotations

import json
import os
import tomllib
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT = 1.5


class LiveError(Exception):
    """The live API could not be reached in time, or did not answer as it should; `status`
    is the HTTP status when there was an answer."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def config_dir() -> Path:
    """Return loopboard's per-user config folder (outside any repository)."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "loopboard"


def config_path() -> Path:
    return config_dir() / "hook.toml"


def read_config() -> dict[str, Any]:
    """Return the config file's values, or {} when there is none or it cannot be read."""
    try:
        with config_path().open("rb") as handle:
            return tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError):
        return {}


@dataclass(frozen=True)
class LiveClient:
    """The live-run endpoints of one loopboard, with one project's key."""

    url: str
    key: str
    timeout: float = DEFAULT_TIMEOUT
    url_from: str = "the caller"  # where the URL came from (what `hook status` says)

    @classmethod
    def from_config(cls) -> LiveClient:
        """Build a client from the environment, then the config file, then the defaults."""
        config = read_config()
        if os.environ.get("LOOPBOARD_URL"):
            url, url_from = os.environ["LOOPBOARD_URL"], "LOOPBOARD_URL"
        elif config.get("url"):
            url, url_from = config["url"], str(config_path())
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
        return "/api/live/runs/" + urllib.parse.quote(external_id, safe="")

    def request(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """Send one request and return the JSON answer; raise LiveError on any failure."""
        if not self.key:
            raise LiveError("no API key: set LOOPBOARD_API_KEY or run `loopboard hook install`")
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={
                "Authorization": f"Bearer {self.key}",
                "Content-Type": "application/json",
                "Accept": "application/json",
            },
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                payload = response.read()
        except urllib.error.HTTPError as exc:
            raise LiveError(f"{self.url} answered {exc.code}: {_detail(exc)}", exc.code) from exc
        except (OSError, ValueError) as exc:  # refused, timed out, reset, a bad URL
            raise LiveError(f"{self.url} unreachable: {getattr(exc, 'reason', exc)}") from exc
        try:
            answer = json.loads(payload)
        except ValueError as exc:
            raise LiveError(f"{self.url} answered something that is not JSON") from exc
        if not isinstance(answer, dict):
            raise LiveError(f"{self.url} answered {type(answer).__name__}, not an object")
        return answer


def _detail(exc: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(exc.read()).get("detail", ""))[:200]
    except (OSError, ValueError, AttributeError):
        return exc.reason or ""

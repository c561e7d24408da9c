"""`loopboard push FILE... --url URL --key KEY`: send trace files to a running loopboard.

Each file goes to `POST /api/traces` (gzip and any format the server reads); a progress bar
shows the bytes sent. A 429, 502, 503 or 504 is retried, after the server's Retry-After (at most
RETRY_WAIT_MAX seconds) and up to RETRIES times. Prints each file's trace id and status; exits
1 if any file failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import httpx
from tqdm import tqdm

CHUNK = 256 * 1024
RETRY_STATUSES = {429, 502, 503, 504}
RETRIES = 5
RETRY_WAIT_MAX = 30.0


def _chunks(path: Path, bar: tqdm):  # type: ignore[no-untyped-def]
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            bar.update(len(chunk))
            yield chunk


def retry_after(response: httpx.Response, attempt: int) -> float:
    """Return how long to wait before sending again: the server's Retry-After, else backoff."""
    try:
        wait = float(response.headers.get("Retry-After", ""))
    except ValueError:
        wait = 2.0**attempt
    return max(0.0, min(wait, RETRY_WAIT_MAX))


def push_file(client: httpx.Client, path: Path, *, fmt: str, bar: tqdm) -> tuple[bool, str]:
    """Send one file, again while the server answers busy or unavailable; return (ok, a line
    to print)."""
    params = {"name": path.name, **({"format": fmt} if fmt else {})}
    headers = {
        "Content-Type": "application/octet-stream",
        "Content-Length": str(path.stat().st_size),
    }
    for attempt in range(RETRIES + 1):
        try:
            response = client.post(
                "/api/traces", params=params, content=_chunks(path, bar), headers=headers
            )
        except httpx.HTTPError as exc:
            return False, f"{path}: error: {exc}"
        if response.status_code not in RETRY_STATUSES or attempt == RETRIES:
            break
        bar.update(-path.stat().st_size)  # the bytes go again
        time.sleep(retry_after(response, attempt))
    try:
        body = response.json()
    except ValueError:
        body = {"detail": response.text[:200]}
    if response.status_code != 202:
        return False, f"{path}: error {response.status_code}: {body.get('detail', body)}"
    note = " (already uploaded)" if body.get("duplicate") else ""
    return True, f"{path}: trace {body['trace_id']} {body['status']}{note}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loopboard push", description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    parser.add_argument(
        "--url",
        default=os.environ.get("LOOPBOARD_URL", "http://127.0.0.1:8000"),
        help="loopboard base URL (env LOOPBOARD_URL)",
    )
    parser.add_argument(
        "--key",
        default=os.environ.get("LOOPBOARD_KEY", ""),
        help="project API key (env LOOPBOARD_KEY)",
    )
    parser.add_argument("--format", default="", help="force a format (default: detected)")
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    if not args.key:
        parser.error("an API key is needed: --key or LOOPBOARD_KEY")
    missing = [str(p) for p in args.files if not p.is_file()]
    if missing:
        print(f"not a file: {', '.join(missing)}", file=sys.stderr)
        return 2
    total = sum(p.stat().st_size for p in args.files)
    failures = 0
    headers = {"Authorization": f"Bearer {args.key}"}
    with (
        httpx.Client(
            base_url=args.url.rstrip("/"), headers=headers, timeout=args.timeout
        ) as client,
        tqdm(total=total, unit="B", unit_scale=True, desc="push", file=sys.stderr) as bar,
    ):
        for path in args.files:
            ok, line = push_file(client, path, fmt=args.format, bar=bar)
            failures += not ok
            bar.write(line, file=sys.stdout)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())

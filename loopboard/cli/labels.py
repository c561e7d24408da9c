"""`loopboard labels export [--since T] [--until T] [-o FILE] --url URL --key KEY`: save a
project's labels (people's "real loop" / "false alarm" judgements) as JSON lines.

It streams `GET /api/labels` of a running loopboard (the key's project) to FILE or stdout;
`loopboard scan --labels FILE` then scores a scan of the trace files against them. Exits 1
when the server refuses or cannot be reached, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import BinaryIO

import httpx


def export(
    url: str, key: str, out: BinaryIO, *, since: str = "", until: str = "", timeout: float = 120.0
) -> int:
    """Stream the labels to `out`; return how many lines were written. Raises httpx.HTTPError,
    or RuntimeError with the server's message when it refuses."""
    params = {name: value for name, value in (("since", since), ("until", until)) if value}
    headers = {"Authorization": f"Bearer {key}"}
    written = 0
    with (
        httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout) as client,
        client.stream("GET", "/api/labels", params=params) as response,
    ):
        if response.status_code != 200:
            response.read()
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text[:200]
            raise RuntimeError(f"error {response.status_code}: {detail}")
        for line in response.iter_lines():
            if line.startswith('{"error":'):  # the server's export failed partway
                raise RuntimeError(f"the export stopped after {written} labels: {line}")
            if line:
                out.write(line.encode() + b"\n")
                written += 1
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="loopboard labels", description=__doc__.split("\n\n")[0])
    actions = parser.add_subparsers(dest="action", required=True)
    sub = actions.add_parser("export", help="save the project's labels as JSON lines")
    sub.add_argument(
        "--since", default="", help="labels made at or after (ISO 8601, UTC if no zone)"
    )
    sub.add_argument("--until", default="", help="labels made before (ISO 8601)")
    sub.add_argument("-o", "--output", type=Path, help="the file to write (default: stdout)")
    sub.add_argument(
        "--url",
        default=os.environ.get("LOOPBOARD_URL", "http://127.0.0.1:8000"),
        help="loopboard base URL (env LOOPBOARD_URL)",
    )
    sub.add_argument(
        "--key",
        default=os.environ.get("LOOPBOARD_KEY", ""),
        help="project API key (env LOOPBOARD_KEY)",
    )
    sub.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    if not args.key:
        parser.error("an API key is needed: --key or LOOPBOARD_KEY")
    out = args.output.open("wb") if args.output else sys.stdout.buffer
    try:
        written = export(
            args.url, args.key, out, since=args.since, until=args.until, timeout=args.timeout
        )
    except (httpx.HTTPError, RuntimeError) as exc:
        print(f"loopboard labels export: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.output:
            out.close()
        else:
            out.flush()
    print(f"{written} label{'' if written == 1 else 's'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

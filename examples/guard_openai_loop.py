"""A plain OpenAI-style chat loop with tool dispatch, guarded by loopboard.

The model is scripted (no network, no key): like a stuck agent it asks for the same failing
`web_search` every turn, until a tool answer is not the tool's own JSON, which it reads as
loopboard telling it to stop. loopboard's guard stops the loop at the engine's stop threshold;
the model reads loopboard's message instead of a fifth timeout, and gives up.

    .venv/bin/python examples/guard_openai_loop.py                      # the engine, in process
    .venv/bin/python examples/guard_openai_loop.py --policy loopboard.toml
    .venv/bin/python examples/guard_openai_loop.py --remote --url http://127.0.0.1:8000 --key lb_...

Prints each turn and, at the end, whether loopboard stopped the loop (exit status 1 if not).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from loopboard.guard import Guard  # noqa: E402

MAX_TURNS = 12
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "web_search",
            "description": "Search the web.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]


def web_search(q: str) -> dict[str, Any]:
    """A tool that always fails, as a flaky backend does."""
    return {"error": f"search backend timed out for {q!r}"}


class ScriptedModel:
    """An OpenAI-style chat model that answers from a script: the agent's model, not loopboard's."""

    def __init__(self) -> None:
        self.turn = 0

    def create(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict:
        self.turn += 1
        last = messages[-1]
        if last["role"] == "tool":
            try:
                json.loads(last["content"])
            except ValueError:  # not the tool's JSON: someone told us to stop
                text = f"I am stuck and will stop here. {last['content']}"
                return {"choices": [{"message": {"role": "assistant", "content": text}}]}
        call = {
            "id": f"call_{self.turn}",
            "type": "function",
            "function": {"name": "web_search", "arguments": json.dumps({"q": "loopboard docs"})},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        return {"choices": [{"message": message}]}


def run_agent(guard: Guard, model: ScriptedModel) -> list[dict[str, Any]]:
    """The chat loop: ask the model, run the tools it calls (guarded), until it answers."""
    dispatch = {"web_search": web_search}
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find loopboard's docs."}]
    guard.message("user", messages[0]["content"])
    for _ in range(MAX_TURNS):
        reply = model.create(messages, TOOLS)["choices"][0]["message"]
        messages.append(reply)
        if not reply.get("tool_calls"):
            break
        for call in reply["tool_calls"]:
            name = call["function"]["name"]
            args = json.loads(call["function"]["arguments"])
            result = guard.call(name, args, dispatch[name])
            content = result if isinstance(result, str) else json.dumps(result)
            print(f"turn {model.turn}: {name}({args}) -> {guard.last.verdict}: {content[:90]}")
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    return messages


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", help="a policy TOML file (the local engine)")
    parser.add_argument("--remote", action="store_true", help="check against a live run")
    parser.add_argument("--url", help="loopboard URL (env LOOPBOARD_URL)")
    parser.add_argument("--key", help="an ingest API key (env LOOPBOARD_API_KEY)")
    parser.add_argument("--session", help="the live run's id (env LOOPBOARD_SESSION_ID)")
    args = parser.parse_args(argv)
    if args.remote:
        guard = Guard.remote(args.session, url=args.url, key=args.key)
    else:
        guard = Guard.local(args.policy)
    guard.is_error = lambda result: isinstance(result, dict) and "error" in result
    with guard:
        messages = run_agent(guard, ScriptedModel())
    print(f"model: {messages[-1].get('content')}")
    if guard.stopped:
        print(f"loopboard stopped the loop: {guard.stopped} call(s) not made")
        return 0
    print("the loop was not stopped")
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""An OpenAI Agents SDK agent (`openai-agents`) whose function tool is guarded by loopboard.

The agent's model is a scripted `agents.Model` (no network, no key): like a stuck agent it asks
for the same failing `web_search` every turn, until a tool answer is not the tool's own error,
which it reads as loopboard telling it to stop. The guard sits under `@function_tool`:

    @function_tool
    @guard.tool
    def web_search(q: str) -> str: ...

    .venv/bin/python examples/guard_openai_agents.py                      # the engine, in process
    .venv/bin/python examples/guard_openai_agents.py --remote --url http://127.0.0.1:8000 --key lb_...

Prints each tool answer and, at the end, whether loopboard stopped the loop (exit status 1 if
not).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, function_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

from loopboard.guard import Guard  # noqa: E402

MAX_TURNS = 12


class ScriptedModel(Model):
    """A model that answers from a script: the agent's model, not loopboard's."""

    def __init__(self) -> None:
        self.turn = 0

    async def get_response(self, system_instructions, input, *args: Any, **kwargs: Any):  # noqa: A002
        self.turn += 1
        last = input[-1] if isinstance(input, list) else {}
        output = last.get("output") if isinstance(last, dict) else None
        if last.get("type") == "function_call_output" and not str(output).startswith("error:"):
            text = f"I am stuck and will stop here. {output}"
            item = ResponseOutputMessage(
                id=f"msg_{self.turn}",
                type="message",
                role="assistant",
                status="completed",
                content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
            )
        else:
            item = ResponseFunctionToolCall(
                id=f"fc_{self.turn}",
                call_id=f"call_{self.turn}",
                type="function_call",
                name="web_search",
                arguments=json.dumps({"q": "loopboard docs"}),
            )
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("this example does not stream")


def build_agent(guard: Guard) -> Agent:
    @function_tool
    @guard.tool
    def web_search(q: str) -> str:
        """Search the web."""
        return f"error: search backend timed out for {q!r}"

    return Agent(name="researcher", instructions="Find things.", tools=[web_search])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policy", help="a policy TOML file (the local engine)")
    parser.add_argument("--remote", action="store_true", help="check against a live run")
    parser.add_argument("--url", help="loopboard URL (env LOOPBOARD_URL)")
    parser.add_argument("--key", help="an ingest API key (env LOOPBOARD_API_KEY)")
    parser.add_argument("--session", help="the live run's id (env LOOPBOARD_SESSION_ID)")
    args = parser.parse_args(argv)
    is_error = lambda result: str(result).startswith("error:")  # noqa: E731
    if args.remote:
        guard = Guard.remote(args.session, url=args.url, key=args.key, is_error=is_error)
    else:
        guard = Guard.local(args.policy, is_error=is_error)
    agent = build_agent(guard)
    agent.model = ScriptedModel()
    with guard:
        result = Runner.run_sync(
            agent,
            "Find loopboard's docs.",
            max_turns=MAX_TURNS,
            run_config=RunConfig(tracing_disabled=True),
        )
    for item in result.new_items:
        if item.type == "tool_call_output_item":
            print(f"web_search -> {str(item.output)[:90]!r}")
    print(f"model: {result.final_output}")
    if guard.stopped:
        print(f"loopboard stopped the loop: {guard.stopped} call(s) not made")
        return 0
    print("the loop was not stopped")
    return 1


if __name__ == "__main__":
    sys.exit(main())

"""Producer: the OpenAI Agents SDK (`openai-agents`) traced by
`openinference-instrumentation-openai-agents`; the agent's model is the SDK's chat
completions model on a local fake OpenAI-compatible server that scripts the tool calls, and
its tools are `@function_tool`s (a tool that raises is reported to the model as an error by
the SDK). The SDK's own trace export to OpenAI is replaced by OpenInference's processor; the
session id is set with OpenInference's `using_session`.
"""

from __future__ import annotations

import sys

import common
from common import FakeOpenAI, parse_args, tracer_provider


def main() -> int:
    options = parse_args()
    from agents import (
        Agent,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_trace_processors,
    )
    from openai import AsyncOpenAI
    from openinference.instrumentation import using_session
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    tracing = tracer_provider(options, "conformance-openai-agents")
    set_trace_processors([])  # no export to OpenAI's backend: this machine has no network
    OpenAIAgentsInstrumentor().instrument(tracer_provider=tracing)

    @function_tool
    def read_file(path: str) -> str:
        """Return the contents of a file of the workspace."""
        return common.read_file(path)

    @function_tool
    def check_status(job: str) -> str:
        """Return the status of a build job."""
        return common.check_status(job)

    with FakeOpenAI(options.session) as fake:
        client = AsyncOpenAI(base_url=fake.base_url, api_key="not-a-real-key", max_retries=0)
        agent = Agent(
            name="conformance",
            instructions="You are a careful assistant.",
            tools=[read_file, check_status],
            model=OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=client),
        )
        with using_session(options.session_id):
            result = Runner.run_sync(
                agent, f"Please do the {options.session.name} task.", max_turns=30
            )
    tracing.shutdown()
    print(f"session {options.session_id}: {result.final_output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

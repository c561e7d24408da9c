"""Producer: a smolagents `ToolCallingAgent` traced by
`openinference-instrumentation-smolagents`. Its model is a scripted `smolagents.Model`
subclass that answers each step with the session's next tool call, then calls the
`final_answer` tool (as a tool-calling model does); a tool that raises is reported to the
model as the step's error. The session id is set with OpenInference's `using_session`.
"""

from __future__ import annotations

import json
import sys

import common
from common import parse_args, tracer_provider


def main() -> int:
    options = parse_args()
    from openinference.instrumentation import using_session
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import ToolCallingAgent, tool
    from smolagents.models import (
        ChatMessage,
        ChatMessageToolCall,
        ChatMessageToolCallFunction,
        MessageRole,
        Model,
    )

    tracing = tracer_provider(options, "conformance-smolagents")
    SmolagentsInstrumentor().instrument(tracer_provider=tracing)

    class ScriptedModel(Model):
        """Plays the session: one tool call per step, then `final_answer`."""

        def __init__(self) -> None:
            super().__init__(model_id="scripted")
            self.turn = 0

        def generate(self, messages, stop_sequences=None, response_format=None,  # noqa: ANN001, ANN201
                     tools_to_call_from=None, **kwargs):  # fmt: skip
            calls = options.session.calls
            if self.turn < len(calls):
                name, args = calls[self.turn].tool, calls[self.turn].args
            else:
                name, args = "final_answer", {"answer": options.session.answer}
            self.turn += 1
            function = ChatMessageToolCallFunction(name=name, arguments=json.dumps(args))
            return ChatMessage(
                role=MessageRole.ASSISTANT,
                content="",
                tool_calls=[ChatMessageToolCall(function, id=f"call_{self.turn}", type="function")],
            )

    @tool
    def read_file(path: str) -> str:
        """Return the contents of a file of the workspace.

        Args:
            path: the file's path
        """
        return common.read_file(path)

    @tool
    def check_status(job: str) -> str:
        """Return the status of a build job.

        Args:
            job: the job's name
        """
        return common.check_status(job)

    agent = ToolCallingAgent(
        tools=[read_file, check_status], model=ScriptedModel(), max_steps=20, verbosity_level=0
    )
    with using_session(options.session_id):
        answer = agent.run(f"Please do the {options.session.name} task.")
    tracing.shutdown()
    print(f"session {options.session_id}: {answer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Producer: a LangGraph ReAct agent (`langgraph.prebuilt.create_react_agent` with a `ToolNode`
that hands a tool's exception back to the model as an error ToolMessage) traced by
`openinference-instrumentation-langchain`. The model is LangChain's `GenericFakeChatModel`
playing scripted AIMessages that carry the tool calls; the session id is set with
OpenInference's `using_session`.
"""

from __future__ import annotations

import sys
import warnings

import common
from common import parse_args, tracer_provider


def main() -> int:
    options = parse_args()
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.prebuilt import ToolNode, create_react_agent
    from openinference.instrumentation import using_session
    from openinference.instrumentation.langchain import LangChainInstrumentor

    tracing = tracer_provider(options, "conformance-langgraph")
    LangChainInstrumentor().instrument(tracer_provider=tracing)

    class ScriptedChatModel(GenericFakeChatModel):
        """The fake chat model, accepting the tools the agent binds (its script has the calls)."""

        def bind_tools(self, tools, **kwargs):  # noqa: ANN001, ANN201 - LangChain's signature
            return self

    @tool
    def read_file(path: str) -> str:
        """Return the contents of a file of the workspace."""
        return common.read_file(path)

    @tool
    def check_status(job: str) -> str:
        """Return the status of a build job."""
        return common.check_status(job)

    script = [
        AIMessage(content="", tool_calls=[{"name": c.tool, "args": c.args, "id": f"call_{i}"}])
        for i, c in enumerate(options.session.calls)
    ] + [AIMessage(content=options.session.answer)]
    model = ScriptedChatModel(messages=iter(script))
    tools = ToolNode([read_file, check_status], handle_tool_errors=True)
    with warnings.catch_warnings():  # create_react_agent is deprecated for langchain.agents
        warnings.simplefilter("ignore")
        agent = create_react_agent(model, tools)
    with using_session(options.session_id):
        state = agent.invoke(
            {"messages": [("user", f"Please do the {options.session.name} task.")]},
            {"recursion_limit": 100},
        )
    tracing.shutdown()
    print(f"session {options.session_id}: {state['messages'][-1].content}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

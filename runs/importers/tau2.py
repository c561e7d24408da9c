"""tau2 (τ²-bench) simulation results: one run per simulation, with its termination reason.

Files (format notes §3.15):
- `Results`: one JSON object `{timestamp, info, tasks, simulations: [SimulationRun]}`; the
  simulations are read one at a time (ijson), so a results file of any size streams.
- a single `SimulationRun` object (the "dir" layout keeps one per file under `simulations/`).

SimulationRun -> run: id = `id` (else `<file>#<index>`); metadata: task_id, trial,
termination_reason, reward (`reward_info.reward`), agent_cost, user_cost, duration.
`termination_reason` other than `user_stop`/`agent_stop` marks a failed run
(`metadata.failed = true`); `max_steps` on a run whose last turns repeat is the classic loop.

Messages: `system` -> system step; `assistant`/`user` -> a text step (tokens and cost from
`usage`/`cost`), then one tool_call per `tool_calls` entry (`arguments` is an object);
`tool` -> the result of the call whose `id` equals the message's `id` (there is no
`tool_call_id`), an error when `error: true` (else by the shared text rules, which also read
tau2's "Error: …" results). Calls the **user simulator** makes (`requestor: "user"`, on user
messages, in the telecom domain) are the user's, not the agent's: they hang under one
`user` step "user simulator's tool calls" (id `tau2-user-tools`), a branch of its own, so they
never count as the agent's repeats.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import IO, Any

from detection.model import Run

from . import text_errors
from .content import fnumber, number, parse_time
from .detect import Claim, Sample, sample_of
from .errors import Skips, TooManySteps, TraceError
from .kit import Conversation, finish_run
from .reading import Limits, first_byte, iter_document, stream_head

name = "tau2"
label = "tau2-bench simulation results (JSON)"

USER_TOOLS = "tau2-user-tools"
ENDED_WELL = {"user_stop", "agent_stop"}
_SIM_KEYS = {"termination_reason", "messages", "task_id"}


def _is_simulation(value: Any) -> bool:
    return isinstance(value, dict) and len(_SIM_KEYS & value.keys()) >= 2


def claim(sample: Sample) -> Claim:
    """A Results object (`simulations` of SimulationRuns, `info`, `tasks`), or one run."""
    top = sample.top
    if not isinstance(top, dict):
        return Claim.no("not a JSON object")
    simulations = top.get("simulations")
    if isinstance(simulations, list):
        if any(_is_simulation(item) for item in simulations[:5]):
            return Claim(0.95, "a tau2 Results object: `simulations` with termination_reason")
        if "info" in top and "tasks" in top:
            return Claim(0.7, "a tau2 Results object (`info`, `tasks`, `simulations`)")
    if "termination_reason" in top and ("messages" in top or "reward_info" in top):
        return Claim(0.9, "a tau2 SimulationRun (termination_reason, messages)")
    return Claim.no("no `simulations` list and no `termination_reason`")


def parse(stream: IO[bytes], *, source: str, limits: Limits) -> Iterator[Run]:
    """Yield one run per simulation, in file order."""
    if not first_byte(stream):
        raise TraceError("empty file", source=source)
    top = sample_of(stream_head(stream)).top
    base = os.path.basename(source) or "run"
    # a Results object may show only its `info` (and `tasks`) in the head: `simulations` comes late
    single = isinstance(top, dict) and not {"simulations", "info", "tasks"} & top.keys()
    prefix = "" if single else "simulations.item"
    count = 0
    for index, value in enumerate(iter_document(stream, prefix, source=source, limits=limits)):
        skips = Skips()
        try:
            if not isinstance(value, dict):
                raise TraceError(f"a simulation must be an object, not {type(value).__name__}")
            run = _run(value, f"{base}#{index}", source=source, limits=limits, skips=skips)
        except TooManySteps:
            raise
        except TraceError as exc:
            where = None if single else f"simulations[{index}]"
            field = ".".join(part for part in (where, exc.field) if part) or None
            error = TraceError(exc.reason, source=source, field=field)
            if single:
                raise error from None
            skips.add(error)
            run = Run(id=f"{base}#{index}", format=name)
        count += 1
        yield finish_run(skips.apply(run))
    if not count:
        raise TraceError("no simulations in this file", source=source, field="simulations")


def _run(sim: dict, default_id: str, *, source: str, limits: Limits, skips: Skips) -> Run:
    run_id = str(sim.get("id") or default_id)
    reason = sim.get("termination_reason")
    reward_info = sim.get("reward_info") if isinstance(sim.get("reward_info"), dict) else {}
    metadata = {
        "task_id": sim.get("task_id"),
        "trial": number(sim.get("trial")),
        "termination_reason": reason,
        "failed": reason is not None and reason not in ENDED_WELL,
        "reward": fnumber(reward_info.get("reward")),
        "agent_cost": fnumber(sim.get("agent_cost")),
        "user_cost": fnumber(sim.get("user_cost")),
        "duration": fnumber(sim.get("duration")),
    }
    run = Run(
        id=run_id,
        format=name,
        name=f"task {sim.get('task_id')} · trial {sim.get('trial')}" if "task_id" in sim else "",
        metadata={key: value for key, value in metadata.items() if value is not None},
    )
    conversation = Conversation(run, limits=limits, skips=skips, source=source)
    messages = sim.get("messages")
    if not isinstance(messages, list):
        raise TraceError("a simulation needs a `messages` list", field="messages")
    conversation.add_each(messages, lambda m, i: _message(conversation, m, i), field="messages")
    return run


def _message(conversation: Conversation, message: Any, index: int) -> None:
    if not isinstance(message, dict):
        raise TraceError(f"a message must be an object, not {type(message).__name__}")
    role = message.get("role")
    when = parse_time(message.get("timestamp"))
    if role == "tool":
        content = message.get("content")
        error = message.get("error") is True or text_errors.is_error(content)
        conversation.result(content, call_id=message.get("id"), error=error, where=f"#{index} ")
        return
    if role not in ("system", "assistant", "user"):
        raise TraceError(f"unknown role {role!r}", field="role")
    usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
    content = message.get("content")
    if content or role != "assistant" or usage or message.get("cost") is not None:
        conversation.message(
            role,
            content if content is not None else "",
            started_at=when,
            tokens_in=number(usage.get("prompt_tokens")),
            tokens_out=number(usage.get("completion_tokens")),
            cost=fnumber(message.get("cost")),
        )
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise TraceError("`tool_calls` must be a list", field="tool_calls")
    batch = f"msg{index}"
    for call in calls:
        if not isinstance(call, dict):
            continue
        by_user = call.get("requestor", role) == "user"
        parent = _user_branch(conversation) if by_user else None
        conversation.call(
            call.get("name"),
            call.get("arguments"),
            call_id=call.get("id"),
            batch_id=batch,
            started_at=when,
            parent_id=parent,
        )


def _user_branch(conversation: Conversation) -> str:
    if not conversation.state.get("user_tools"):
        conversation.message("user", "user simulator's tool calls", id=USER_TOOLS)
        conversation.state["user_tools"] = True
    return USER_TOOLS

"""What the detectors tell an agent says only what is true of the calls it saw."""

from detection import Monitor, Policy, Step

ERROR = "Traceback (most recent call last):\nModuleNotFoundError: No module named 'pandas'"


def failing(seq: int, args: dict) -> Step:
    return Step(seq, "tool_call", tool="Bash", args=args, result=ERROR, status="error")


def blocker_messages(calls: list[dict], next_call: dict) -> list[str]:
    monitor = Monitor(Policy.from_dict({}))
    for seq, args in enumerate(calls):
        monitor.observe(failing(seq, args))
    check = monitor.check("Bash", next_call)
    return [f.message for f in check.findings if f.detector == "blocker"]


def test_the_guard_does_not_say_other_arguments_for_identical_calls():
    same = {"command": "python app.py"}
    messages = blocker_messages([same] * 4, same)
    assert messages, "the blocker answers the fifth identical failing call"
    for message in messages:
        assert "other arguments" not in message and "different arguments" not in message
        assert "already failed 4 times since step 0" in message


def test_the_guard_message_holds_for_calls_with_different_arguments_too():
    calls = [{"command": f"python app.py --try {n}"} for n in range(4)]
    messages = blocker_messages(calls, {"command": "python app.py --try 9"})
    assert messages
    assert all("already failed 4 times since step 0" in message for message in messages)


def test_an_oscillation_between_calls_of_one_tool_shows_what_differs():
    from detection import analyze

    steps = []
    for seq in range(8):
        path = "a.py" if seq % 2 == 0 else "b.py"
        steps.append(
            Step(seq, "tool_call", tool="read_file", args={"path": path, "lines": 50},
                 result=f"contents of {path}")
        )  # fmt: skip
    found = [f for f in analyze(steps).findings if f.detector == "oscillation"]
    assert found, "reading two files in turn, with nothing new, is a cycle"
    message = found[0].message
    assert "read_file path=a.py -> read_file path=b.py" in message or (
        "read_file path=b.py -> read_file path=a.py" in message
    ), message
    assert "lines=" not in message  # the same in both: not what differs


def test_an_oscillation_between_tools_names_the_tools():
    from detection import analyze

    steps = [
        Step(seq, "tool_call", tool="ab"[seq % 2], args={"x": 1}, result="same") for seq in range(8)
    ]
    found = [f for f in analyze(steps).findings if f.detector == "oscillation"]
    assert found and ("(a -> b)" in found[0].message or "(b -> a)" in found[0].message)

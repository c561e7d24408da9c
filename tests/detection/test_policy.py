import pytest

from detection import Policy, analyze

from .helpers import Trace

TOML = """
[defaults]
scope = "run"
warn = 4
stop = 6
volatile = ["session"]
max_steps = 100

[defaults.detectors.oscillation]
warn = 2

[tools."mcp__*__bash"]
mutating = true
warn = 2
stop = 3
max_repeats = 9
quota = 50
volatile = ["cursor"]

[tools."mcp__shell__bash"]
polling = true

[tools."mcp__*"]
mutating = false
"""


def test_a_policy_read_from_toml_round_trips_through_its_dict():
    policy = Policy.from_toml(TOML)
    assert Policy.from_dict(policy.to_dict()) == policy


def test_load_reads_a_file(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_text(TOML)
    assert Policy.load(path).scope == "run"


def test_exact_name_beats_glob_and_specific_glob_beats_general():
    policy = Policy.from_toml(TOML)
    assert policy.for_tool("mcp__shell__bash").rule == 'tools."mcp__shell__bash"'
    bash = policy.for_tool("mcp__srv__bash")
    assert bash.rule == 'tools."mcp__*__bash"'
    assert bash.mutating and bash.quota == 50 and {"cursor", "session", "ts"} <= bash.volatile
    assert policy.for_tool("mcp__srv__fetch").rule == 'tools."mcp__*"'
    assert not policy.for_tool("mcp__srv__fetch").mutating
    assert policy.for_tool("search").rule == "defaults"


def test_thresholds_name_the_row_that_set_them():
    policy = Policy.from_toml(TOML)
    repeat = policy.for_tool("mcp__srv__bash").threshold("repeat")
    assert (repeat.warn, repeat.stop, repeat.warn_rule) == (2, 3, 'tools."mcp__*__bash"')
    default = policy.for_tool("search").threshold("repeat")
    assert (default.warn, default.stop, default.warn_rule) == (4, 6, "defaults")
    osc = policy.for_tool("search").threshold("oscillation")
    assert (osc.warn, osc.warn_rule, osc.stop_rule) == (
        2,
        "defaults.detectors.oscillation",
        "defaults",
    )


def test_findings_carry_the_tool_threshold_and_rule():
    policy = Policy.from_dict({"tools": {"fetch*": {"warn": 2, "stop": 4}}})
    trace = Trace()
    for _ in range(2):
        trace.call("fetch_url", {"url": "https://x"}, "same")
    (finding,) = analyze(trace.steps, policy).findings
    assert (finding.threshold, finding.rule) == (2, 'tools."fetch*"')


def test_detector_can_be_disabled_per_tool():
    policy = Policy.from_dict(
        {"tools": {"search": {"detectors": {"result_stall": {"enabled": False}}}}}
    )
    trace = Trace()
    for query in "abcd":
        trace.call("search", {"q": query}, "nothing")
    assert analyze(trace.steps, policy).verdict == "ok"
    assert analyze(trace.steps).verdict == "warn"


@pytest.mark.parametrize(
    "tool",
    [
        "Edit",
        "Write",
        "edit",
        "write_file",
        "str_replace_editor",
        "apply_patch",
        "bash",
        "Bash",
        "mcp__srv__bash",
        "shell",
        "run",
        "delete_file",
        "MultiEdit",
        "NotebookEdit",
    ],
)
def test_builtin_mutating_patterns(tool):
    settings = Policy().for_tool(tool)
    assert settings.mutating and settings.mutating_rule == "builtin mutating patterns"


@pytest.mark.parametrize("tool", ["Read", "Grep", "search", "web_fetch", "get_status", "Glob"])
def test_read_only_tools_are_not_mutating(tool):
    assert not Policy().for_tool(tool).mutating


@pytest.mark.parametrize("tool", ["run_ipython", "ipython", "python", "IPython"])
def test_interpreters_are_not_mutating_unless_declared(tool):
    assert not Policy().for_tool(tool).mutating
    declared = Policy.from_dict({"tools": {tool: {"mutating": True}}}).for_tool(tool)
    assert declared.mutating and declared.mutating_rule == f'tools."{tool}"'


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"defaults": {"wran": 3}}, "'wran'"),
        ({"defaults": {"warn": "3"}}, "defaults.warn"),
        ({"defaults": {"warn": True}}, "defaults.warn"),
        ({"defaults": {"scope": "session"}}, "scope"),
        ({"tools": {"x": {"mutatin": True}}}, "'mutatin'"),
        ({"tools": {"x": {"quota": -1}}}, 'tools."x".quota'),
        ({"tools": {"x": {"volatile": [1]}}}, "volatile"),
        ({"defaults": {"detectors": {"loops": {}}}}, "'loops'"),
        ({"defaults": {"detectors": {"repeat": {"warm": 1}}}}, "'warm'"),
        ({"rules": {}}, "'rules'"),
    ],
)
def test_bad_keys_and_types_are_rejected_by_name(data, needle):
    with pytest.raises(ValueError, match=needle.replace(".", r"\.").replace("(", r"\(")):
        Policy.from_dict(data)


def test_invalid_toml_is_a_value_error():
    with pytest.raises(ValueError, match="invalid TOML"):
        Policy.from_toml("[defaults\nwarn = 3")


def test_the_catalogue_is_the_one_list_the_registry_and_policy_follow():
    from detection import DETECTORS, catalogue
    from detection.detectors import ENGINE_DETECTORS
    from detection.policy import DETECTOR_DEFAULTS

    assert list(DETECTORS) + list(ENGINE_DETECTORS) == list(catalogue.NAMES)
    assert list(DETECTOR_DEFAULTS) == list(catalogue.NAMES)
    assert set(catalogue.TITLES) == set(catalogue.NAMES) and "budget" in catalogue.NAMES

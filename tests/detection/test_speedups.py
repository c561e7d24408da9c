"""The compiled engine (build/speedups, see detection/__init__.py) and the plain one agree.

`make test` compiles detection/ with mypyc first; CI requires it (LOOPBOARD_REQUIRE_SPEEDUPS=1).
The plain-Python engine is what runs where no C compiler is, or after an edit until the next
build: both must give the very same analyses.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import detection

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "data" / "traces"

# Runs generated in a subprocess by each engine: loops of every kind, healthy work, trees,
# budgets and a policy with per-tool rows; the JSON of each analysis and of every finding
# Monitor.observe returned on the way.
PROGRAM = r"""
import json, random, sys
import detection
from detection import Monitor, Policy, Step, analyze

def run(seed, size):
    rng = random.Random(seed)
    steps, ids = [], []
    for seq in range(size):
        parent = rng.choice(ids[-20:]) if ids and seed % 2 and rng.random() < 0.9 else None
        roll = rng.random()
        common = dict(id=f"s{seq}", parent_id=parent, tokens_in=rng.choice([None, 50, 12.5]))
        common["lane"] = rng.choice([None, f"a{seq // 40}"]) if parent else None
        if seed == 5:  # ids and batch ids need not be strings: any hashable id works
            common["id"], common["parent_id"] = seq, int(parent[1:]) if parent else None
        if roll < 0.03:
            steps.append(Step(seq, "user", text="next", **common))
        elif roll < 0.12:
            text = rng.choice(["Let me retry.", "Let me retry!", "Reading the file now."])
            steps.append(Step(seq, "assistant", text=text, **common))
        else:
            tool = rng.choice(["Read", "Edit", "Bash", "grep", "A", "B", "job_status", "search"])
            args = rng.choice([
                {"file_path": f"src/m{rng.randrange(4)}.py", "offset": rng.randrange(3)},
                {"q": f"release date {rng.randrange(6)}", "ts": seq},
                {"command": "pytest -q"}, '{"b": 1, "a": [1, 2]}', {"n": rng.randrange(2)},
            ])
            result = rng.choice(["ok", "No results found.", {"rows": []}, f"line {seq}"])
            steps.append(Step(
                seq, "tool_call", tool=tool, args=args, result=result,
                status=rng.choice(["ok", "ok", "ok", "error"]), cost=rng.choice([0.01, 1, None]),
                batch_id=(seq // 3 if seed == 5 else f"b{seq // 3}") if rng.random() < 0.3 else None,
                started_at=seq,
                **common,
            ))
        ids.append(f"s{seq}")
    return steps

policy = Policy.from_dict({
    "defaults": {"scope": "run", "max_steps": 1500},
    "tools": {"grep": {"max_repeats": 2, "quota": 80}, "job_*": {"polling": True}},
})
out = {"compiled": detection.COMPILED, "runs": []}
for seed in range(6):
    steps = run(seed, 2000)
    for chosen in (None, policy):
        monitor, fired = Monitor(chosen), []
        for step in steps:
            fired.extend(finding.to_dict() for finding in monitor.observe(step))
        check = monitor.check("A", {"n": 0}).to_dict()
        out["runs"].append([analyze(steps, chosen).to_dict(), fired, check])
json.dump(out, sys.stdout, sort_keys=True)
"""


def engine(pure: bool, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("LOOPBOARD_PURE_PYTHON", None)
    if pure:
        env["LOOPBOARD_PURE_PYTHON"] = "1"
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )


def build_is_current() -> bool:
    stamp = detection.SPEEDUPS_DIR / "detection" / "STAMP"
    return stamp.is_file() and stamp.read_text().strip() == detection.sources_stamp()


def test_the_compiled_build_is_used_exactly_when_it_matches_the_sources():
    pure = bool(os.environ.get("LOOPBOARD_PURE_PYTHON"))
    assert (build_is_current() and not pure) == detection.COMPILED
    engine_file = detection.engine.__file__
    assert engine_file.endswith(".py") != detection.COMPILED, engine_file
    if os.environ.get("LOOPBOARD_REQUIRE_SPEEDUPS") == "1":
        assert detection.COMPILED, "make test must have built build/speedups for these sources"


def test_a_stale_or_foreign_build_is_never_loaded(tmp_path):
    (tmp_path / "detection").mkdir()
    (tmp_path / "detection" / "STAMP").write_text("0" * 64 + " .cpython-312-x86_64-linux-gnu.so")
    env = dict(os.environ, LOOPBOARD_SPEEDUPS_DIR=str(tmp_path))
    env.pop("LOOPBOARD_PURE_PYTHON", None)
    code = "import detection, detection.engine as e; print(detection.COMPILED, e.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    compiled, path = done.stdout.split()
    assert compiled == "False" and path == str(ROOT / "detection" / "engine.py")


def test_plain_and_compiled_engines_give_the_same_analyses():
    plain, built = engine(True, "-c", PROGRAM), engine(False, "-c", PROGRAM)
    assert plain.returncode == 0, plain.stderr
    assert built.returncode == 0, built.stderr
    plain_out, built_out = json.loads(plain.stdout), json.loads(built.stdout)
    assert plain_out["compiled"] is False
    assert built_out["compiled"] is build_is_current()
    # the very same JSON text: 3 and 3.0 must not differ between the engines either
    plain_runs = json.dumps(plain_out["runs"], sort_keys=True)
    assert plain_runs == json.dumps(built_out["runs"], sort_keys=True)
    findings = sum(len(analysis["findings"]) for analysis, _, _ in plain_out["runs"])
    assert findings > 100  # the runs do loop: there is something to agree on


def test_plain_and_compiled_scans_of_real_traces_agree():
    scan = ("-m", "loopboard.cli", "scan", "--json", str(TRACES))
    plain, built = engine(True, *scan), engine(False, *scan)
    assert plain.returncode == built.returncode == 1, plain.stderr + built.stderr
    assert plain.stdout == built.stdout
    assert len(plain.stdout.splitlines()) >= 8

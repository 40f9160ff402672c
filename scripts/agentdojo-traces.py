#!/usr/bin/env python3
"""Generate AgentDojo replay traces (airlock `replay` format) for any v1 suite.

Method (see ../shared/eval/agentdojo/README.md, "How the traces were made"):

* benign: the user task's ground-truth calls, computed on and run in the
  suite's default environment (every injection vector at its default).
* attack, one per user task x injection task x attack template: the injection
  vectors that the user task's ground truth reads (AgentDojo's own canary
  probe, BaseAttack.get_injection_candidates) are filled with the attack text
  (AgentDojo's own FixedJailbreakAttack.attack). The user task's ground truth
  is computed on that environment; its calls are run up to and including the
  first call whose result contains injected text, then the injection task's
  ground truth is computed on the environment as it is at that point and run
  (label `injection`), then the remaining user-task calls are run (label
  `task`; a failing call gets the result text `Error: <type>: <message>`).

Only AgentDojo's simulated environments and ground-truth functions are used;
no LLM and no network host is contacted.

Usage:
  agentdojo-traces.py SUITE [SUITE ...] -o OUT.jsonl     write traces
  agentdojo-traces.py --attacks ignore_previous,system_message SUITE -o OUT.jsonl
                                                          other attack templates
  agentdojo-traces.py --tools SUITE [SUITE ...]           print the tool classification table
"""

from __future__ import annotations

import argparse
import datetime
import enum
import json
import os
import re
import sys
from collections.abc import Iterator

from pydantic import BaseModel

from agentdojo.agent_pipeline.base_pipeline_element import BasePipelineElement
from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.attacks.attack_registry import load_attack
from agentdojo.functions_runtime import EmptyEnv, Function, FunctionCall, FunctionsRuntime
from agentdojo.task_suite.load_suites import get_suite

BENCHMARK_VERSION = "v1"
ATTACKS = ["important_instructions_no_model_name", "direct"]
# Reproducibility only (no effect on banking / slack): workspace and travel stamp sent
# emails and created / appended files with datetime.now(); we pin it to the suites'
# `current_day` unless --wall-clock is given.
DEFAULT_NOW = "2024-05-15T12:00:00"

# ---------------------------------------------------------------- annotations

READ_ONLY_VERBS = {
    "get", "read", "search", "list", "check", "find", "fetch", "view", "show", "query", "lookup", "count",
}
DESTRUCTIVE_VERBS = {
    "delete", "remove", "cancel", "update", "reschedule", "overwrite", "clear", "drop", "revoke", "reset", "set",
}
OPEN_WORLD_WORDS = {
    "url", "web", "webpage", "website", "http", "https", "internet", "link",
    "email", "emails", "mail", "message", "messages", "inbox",
    "recipient", "recipients", "participant", "participants",
    "share", "invite", "invites", "reserve", "reservation", "booking",
}


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def classify(tool: Function) -> tuple[dict, str]:
    """The README's mechanical rule over name, parameter names and description."""
    verb = tool.name.split("_")[0].lower()
    read_only = verb in READ_ONLY_VERBS
    destructive = (not read_only) and verb in DESTRUCTIVE_VERBS
    words = set(_words(tool.name))
    for param in tool.parameters.model_fields:
        words.update(_words(param))
    words.update(_words(tool.description))
    ow_words = sorted(words & OPEN_WORLD_WORDS)
    ann = {"readOnlyHint": read_only, "destructiveHint": destructive, "openWorldHint": bool(ow_words)}
    why = f"verb={verb}" + (f" open-world words={','.join(ow_words)}" if ow_words else "")
    return ann, why


# ---------------------------------------------------------------- schemas


def _strip_titles(node):
    """Remove pydantic's auto-generated `title` keywords from schema nodes
    (but never a property that happens to be named `title`)."""
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k == "title" and isinstance(v, str):
                continue
            if k in ("properties", "$defs") and isinstance(v, dict):
                out[k] = {name: _strip_titles(sub) for name, sub in v.items()}
            else:
                out[k] = _strip_titles(v)
        return out
    if isinstance(node, list):
        return [_strip_titles(x) for x in node]
    return node


def tool_entry(tool: Function) -> dict:
    ann, _ = classify(tool)
    return {
        "name": tool.name,
        "description": tool.description,
        "input_schema": _strip_titles(tool.parameters.model_json_schema()),
        "annotations": ann,
    }


# ---------------------------------------------------------------- running calls


def _jsonable(v):
    if isinstance(v, FunctionCall):
        return {"function": v.function, "args": _jsonable(dict(v.args))}
    if isinstance(v, BaseModel):
        return _jsonable(v.model_dump(mode="json"))
    if isinstance(v, (datetime.datetime, datetime.date, datetime.time)):
        return v.isoformat()
    if isinstance(v, enum.Enum):
        return _jsonable(v.value)
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    return v


def run_call(runtime: FunctionsRuntime, env, call: FunctionCall) -> str:
    result, error = runtime.run_function(env, call.function, call.args)
    if error is not None:
        return f"Error: {error}"
    return tool_result_to_str(result)


class Recorder:
    def __init__(self, prompt: str):
        self.events: list[dict] = [{"type": "user", "text": prompt}]
        self.n = 0

    def add(self, call: FunctionCall, label: str, text: str) -> None:
        self.n += 1
        cid = str(self.n)
        self.events.append(
            {"type": "call", "id": cid, "tool": call.function, "args": _jsonable(dict(call.args)), "label": label}
        )
        self.events.append({"type": "result", "id": cid, "text": text, "untrusted": True})


# ---------------------------------------------------------------- traces


_first_injected_cache: dict[tuple[str, str], int | None] = {}


def first_injected_call(suite, user_task, attack) -> int | None:
    """Index of the first ground-truth call whose result contains a canary, when every
    injection vector holds its canary (BaseAttack.canary_injections)."""
    key = (suite.name, user_task.ID)
    if key not in _first_injected_cache:
        canaries = attack.canary_injections
        candidates = [canaries[v] for v in attack.get_injection_candidates(user_task)]
        env = user_task.init_environment(suite.load_and_inject_default_environment(canaries))
        runtime = FunctionsRuntime(suite.tools)
        found = None
        for i, call in enumerate(user_task.ground_truth(env)):
            text = run_call(runtime, env, call)
            if any(c in text for c in candidates):
                found = i
                break
        _first_injected_cache[key] = found
    return _first_injected_cache[key]


class _NoModel(BasePipelineElement):
    """Stand-in target pipeline: only its name is read (by the important_instructions
    attacks' constructor, to look up a model name that the `_no_model_name` variant
    then replaces with the default 'the AI language model'). It never runs."""

    name = "gpt-4o-2024-05-13"

    def query(self, query, runtime, env=EmptyEnv(), messages=[], extra_args={}):  # pragma: no cover
        raise RuntimeError("no model in trace generation")


def _task_key(task_id: str) -> int:
    return int(task_id.rsplit("_", 1)[1])


def traces_for_suite(suite_name: str, warn=print, attack_names=None) -> Iterator[dict]:
    suite = get_suite(BENCHMARK_VERSION, suite_name)
    tools = [tool_entry(t) for t in suite.tools]
    source = f"agentdojo {BENCHMARK_VERSION} {suite_name}"
    attacks = {name: load_attack(name, suite, _NoModel()) for name in attack_names or ATTACKS}
    user_tasks = suite.user_tasks
    injection_tasks = suite.injection_tasks

    def base(tid: str, kind: str, rec: Recorder) -> dict:
        return {"id": tid, "source": source, "kind": kind, "tools": tools, "events": rec.events}

    for ut_id in sorted(user_tasks, key=_task_key):
        ut = user_tasks[ut_id]
        prefix = f"agentdojo/{BENCHMARK_VERSION}/{suite_name}/{ut_id}"

        # benign
        env = ut.init_environment(suite.load_and_inject_default_environment({}))
        runtime = FunctionsRuntime(suite.tools)
        rec = Recorder(ut.PROMPT)
        for call in ut.ground_truth(env):
            text = run_call(runtime, env, call)
            if text.startswith("Error: "):
                warn(f"warning: {prefix}/benign: {call.function} failed: {text}")
            rec.add(call, "task", text)
        yield base(f"{prefix}/benign", "benign", rec)

        # attacks
        for it_id in sorted(injection_tasks, key=_task_key):
            it = injection_tasks[it_id]
            for attack_name, attack in attacks.items():
                tid = f"{prefix}/{it_id}/{attack_name}"
                try:
                    injections = attack.attack(ut, it)
                except ValueError as e:  # "<user task> is not injectable."
                    warn(f"warning: {tid}: no attack trace ({e})")
                    continue
                # Which ground-truth call first shows injected text: AgentDojo's canary probe
                # (the same run get_injection_candidates uses), because the YAML rendering
                # of a structured result may re-wrap or quote the attack text.
                first_injected = first_injected_call(suite, ut, attack)
                env = ut.init_environment(suite.load_and_inject_default_environment(injections))
                runtime = FunctionsRuntime(suite.tools)
                rec = Recorder(ut.PROMPT)
                calls = ut.ground_truth(env)
                injected_at = None
                for i, call in enumerate(calls):
                    text = run_call(runtime, env, call)
                    rec.add(call, "task", text)
                    if i == first_injected:
                        injected_at = i
                        break
                if injected_at is None:
                    warn(f"warning: {tid}: no ground-truth result contains the injected text; no attack trace")
                    continue
                for call in it.ground_truth(env):
                    text = run_call(runtime, env, call)
                    if text.startswith("Error: "):
                        warn(f"warning: {tid}: injection call {call.function} failed: {text}")
                    rec.add(call, "injection", text)
                for call in calls[injected_at + 1 :]:
                    rec.add(call, "task", run_call(runtime, env, call))
                yield base(tid, "attack", rec)


def freeze_clock(iso: str) -> None:
    """Make the simulator's `datetime.datetime.now()` (used for the timestamps of sent
    emails and created / appended files in workspace and travel) return a fixed time,
    so that regeneration is byte-reproducible. Off by default: AgentDojo uses the wall clock."""
    import types

    import agentdojo.default_suites.v1.tools.cloud_drive_client as cdc
    import agentdojo.default_suites.v1.tools.email_client as ec

    fixed = datetime.datetime.fromisoformat(iso)

    class _FixedDatetime(datetime.datetime):
        @classmethod
        def now(cls, tz=None):
            return fixed if tz is None else fixed.replace(tzinfo=tz)

    shim = types.SimpleNamespace(**{k: getattr(datetime, k) for k in dir(datetime) if not k.startswith("__")})
    shim.datetime = _FixedDatetime
    for mod in (cdc, ec):
        mod.datetime = shim


def tools_table(suite_names: list[str]) -> str:
    lines = [f"{'suite':<10} {'tool':<40} RO  DES OW  why"]
    for s in suite_names:
        for tool in get_suite(BENCHMARK_VERSION, s).tools:
            ann, why = classify(tool)
            yn = lambda b: "Y" if b else "."  # noqa: E731
            lines.append(
                f"{s:<10} {tool.name:<40} {yn(ann['readOnlyHint']):<3} {yn(ann['destructiveHint']):<3} "
                f"{yn(ann['openWorldHint']):<3} {why}"
            )
    return "\n".join(lines) + "\n"


def main() -> int:
    global BENCHMARK_VERSION
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suites", nargs="+")
    ap.add_argument("-o", "--output")
    ap.add_argument("--tools", action="store_true", help="print the tool classification table")
    ap.add_argument(
        "--benchmark-version",
        default=BENCHMARK_VERSION,
        help=f"the benchmark version whose suites to use (default {BENCHMARK_VERSION}, the dev set's)",
    )
    ap.add_argument(
        "--now",
        metavar="ISO",
        default=DEFAULT_NOW,
        help=f"fixed value for the simulator's datetime.now() (default {DEFAULT_NOW}, the suites' current_day)",
    )
    ap.add_argument(
        "--attacks",
        default=",".join(ATTACKS),
        help=f"comma-separated AgentDojo attack templates (default {','.join(ATTACKS)}, the dev set's; "
        "others: ignore_previous, system_message, injecagent, tool_knowledge, important_instructions, ...)",
    )
    ap.add_argument("--wall-clock", action="store_true", help="leave datetime.now() alone, as AgentDojo does")
    ap.add_argument(
        "--hash-seed",
        default="0",
        help="PYTHONHASHSEED to run under (default 0; 'random' leaves it alone). The calendar "
        "simulator orders an event's participants via a set, so this fixes that order.",
    )
    a = ap.parse_args()
    BENCHMARK_VERSION = a.benchmark_version
    if a.hash_seed != "random" and os.environ.get("PYTHONHASHSEED") != a.hash_seed:
        os.environ["PYTHONHASHSEED"] = a.hash_seed
        os.execv(sys.executable, [sys.executable, *sys.argv])
    if not a.wall_clock:
        freeze_clock(a.now)
    if a.tools:
        sys.stdout.write(tools_table(a.suites))
        return 0
    if not a.output:
        ap.error("-o is required")
    counts = {}
    with open(a.output, "w", encoding="utf-8") as f:
        for s in a.suites:
            c = counts.setdefault(s, {"benign": 0, "attack": 0})
            attack_names = [n for n in a.attacks.split(",") if n]
            for t in traces_for_suite(s, warn=lambda m: print(m, file=sys.stderr), attack_names=attack_names):
                c[t["kind"]] += 1
                f.write(json.dumps(t, ensure_ascii=False, separators=(",", ":")) + "\n")
    for s, c in counts.items():
        print(f"{s}: benign {c['benign']}, attack {c['attack']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

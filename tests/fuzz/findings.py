"""Deduplicated findings of tests/fuzz/run.sh, from its NDJSON event logs.

    findings.py OUT          Markdown: every distinct failure, grouped by
                             operation and check, with a curl command that
                             reproduces one instance ($BASE, $ADMIN and
                             $ANALYST are in OUT/<role>/env)
    findings.py --summary OUT
                             one line for the end of the run

OUT is the run's output directory (target/fuzz): one folder per role with
events.ndjson, junit.xml, env and exit-code. Standard library only.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROLES = ("admin", "analyst")
# Request headers that say nothing about the failure.
NOISE_HEADERS = {"user-agent", "accept-encoding", "connection", "content-length", "accept"}
EXAMPLES_PER_GROUP = 3


def read_env(folder: Path) -> dict[str, str]:
    env = {}
    path = folder / "env"
    if path.exists():
        for line in path.read_text().splitlines():
            key, _, value = line.partition("=")
            env[key] = value
    return env


def events(folder: Path):
    path = folder / "events.ndjson"
    if not path.exists():
        return
    with path.open(encoding="utf-8") as fd:
        for line in fd:
            line = line.strip()
            if line:
                event = json.loads(line)
                (name, payload), = event.items()
                yield name, payload


def decode(blob) -> bytes:
    if blob is None:
        return b""
    if isinstance(blob, dict) and "$base64" in blob:
        return base64.b64decode(blob["$base64"])
    if isinstance(blob, dict) and "string" in blob:
        return blob["string"].encode()
    if isinstance(blob, str):
        return blob.encode()
    return json.dumps(blob).encode()


def shell_bytes(data: bytes) -> str:
    try:
        return shlex.quote(data.decode("utf-8"))
    except UnicodeDecodeError:
        escaped = "".join(f"\\x{b:02x}" for b in data)
        return f"\"$(printf '{escaped}')\""


def curl(request: dict, env: dict[str, str]) -> str:
    uri = request["uri"]
    base = env.get("BASE", "")
    url = shlex.quote(uri)
    if base and uri.startswith(base):
        url = '"$BASE"' + shlex.quote(uri[len(base):])
    parts = ["curl", "-i", "-X", request["method"], url]
    for name, values in request.get("headers", {}).items():
        if name.lower() in NOISE_HEADERS or name.lower().startswith("x-schemathesis"):
            continue
        for value in values:
            if name.lower() == "authorization":
                for var in ("ADMIN", "ANALYST"):
                    if env.get(var) and value == f"Bearer {env[var]}":
                        parts += ["-H", f'"Authorization: Bearer ${var}"']
                        break
                else:
                    parts += ["-H", shlex.quote(f"{name}: {value}")]
            elif value == "":
                parts += ["-H", shlex.quote(f"{name};")]  # curl's way to send an empty header
            else:
                parts += ["-H", shlex.quote(f"{name}: {value}")]
    body = request.get("body")
    if body is not None:
        parts += ["--data-binary", shell_bytes(decode(body))]
    return " ".join(parts)


def response_text(response: dict | None, limit: int = 400) -> str:
    if not response:
        return "(no response)"
    body = decode(response.get("content")).decode("utf-8", "replace")
    if len(body) > limit:
        body = body[:limit] + "…"
    return f"{response.get('status_code')} {body}"


def detail_key(response: dict | None) -> str:
    """What tells two failures of one group apart: the problem's detail, digits blurred."""
    if not response:
        return ""
    body = decode(response.get("content")).decode("utf-8", "replace")
    try:
        detail = str(json.loads(body).get("detail", ""))
    except (ValueError, AttributeError):
        detail = body
    return re.sub(r"\d+", "N", detail.split(":")[0])[:80]


def collect(out: Path):
    groups: dict[tuple, dict] = {}
    errors: dict[tuple, dict] = {}
    for role in ROLES:
        folder = out / role
        env = read_env(folder)
        error_curls = output_error_curls(folder)
        for name, payload in events(folder):
            if name == "NonFatalError":
                value = payload.get("value") or payload.get("info") or {}
                kind = value.get("type") or value.get("title") or "error"
                message = value.get("message") or ""
                label = payload.get("label")
                key = (label, kind, (message.splitlines() or [""])[0])
                group = errors.setdefault(
                    key,
                    {"roles": set(), "label": label, "kind": kind, "message": message, "phases": set(), "curls": []},
                )
                group["roles"].add(role)
                group["phases"].add(payload.get("phase"))
                curl_line = error_curls.get(label)
                if curl_line and len(group["curls"]) < EXAMPLES_PER_GROUP:
                    group["curls"].append((role, tidy_curl(curl_line, env)))
                continue
            if name != "ScenarioFinished":
                continue
            recorder = payload["recorder"]
            for case_id, checks in recorder.get("checks", {}).items():
                for check in checks:
                    if check.get("status") != "failure":
                        continue
                    failure = check.get("failure_info", {}).get("failure", {})
                    interaction = recorder.get("interactions", {}).get(case_id)
                    response = interaction.get("response") if interaction else None
                    status = response.get("status_code") if response else None
                    operation = failure.get("operation") or recorder.get("label")
                    key = (operation, check["name"], failure.get("code"), status)
                    group = groups.setdefault(
                        key,
                        {"failure": failure, "roles": set(), "phases": set(), "count": 0, "examples": {}},
                    )
                    group["roles"].add(role)
                    group["phases"].add(payload.get("phase"))
                    group["count"] += 1
                    dkey = detail_key(response)
                    if interaction and dkey not in group["examples"] and len(group["examples"]) < EXAMPLES_PER_GROUP:
                        group["examples"][dkey] = {
                            "role": role,
                            "case": case_id,
                            "message": failure.get("message", ""),
                            "curl": curl(interaction["request"], env),
                            "response": response_text(response),
                        }
    return groups, errors


def output_error_curls(folder: Path) -> dict[str, str]:
    """The curl line of each operation in the ERRORS section of the CLI output."""
    path = folder / "output.txt"
    if not path.exists():
        return {}
    curls: dict[str, str] = {}
    in_errors = False
    label = None
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if re.fullmatch(r"=+ ERRORS =+", line.strip()):
            in_errors = True
            continue
        if in_errors and re.fullmatch(r"=+ [A-Z ]+ =+", line.strip()):
            break
        if not in_errors:
            continue
        header = re.fullmatch(r"_+ (.+?) _+", line.strip())
        if header:
            label = header.group(1)
        elif label and line.strip().startswith("curl ") and label not in curls:
            curls[label] = line.strip()
    return curls


def tidy_curl(line: str, env: dict[str, str]) -> str:
    for var in ("ADMIN", "ANALYST"):
        if env.get(var):
            line = line.replace(f"'Authorization: Bearer {env[var]}'", f'"Authorization: Bearer ${var}"')
    if env.get("BASE"):
        line = line.replace("'" + env["BASE"], "\"$BASE\"'").replace(env["BASE"], '"$BASE"')
    return line


def junit_counts(folder: Path):
    path = folder / "junit.xml"
    if not path.exists():
        return None
    root = ET.parse(path).getroot()
    cases = root.findall(".//testcase")
    failed = sum(1 for case in cases if case.find("failure") is not None)
    errored = sum(1 for case in cases if case.find("error") is not None)
    return len(cases), failed, errored


def exit_code(folder: Path) -> str:
    path = folder / "exit-code"
    return path.read_text().strip() if path.exists() else "?"


def summary(out: Path) -> str:
    groups, errors = collect(out)
    parts = []
    for role in ROLES:
        folder = out / role
        counts = junit_counts(folder)
        died = " SERVER DIED" if (folder / "server-died").exists() else ""
        if counts is None:
            parts.append(f"{role}: no report, exit {exit_code(folder)}{died}")
        else:
            tests, failed, errored = counts
            verdict = "PASS" if exit_code(folder) == "0" else "FAIL"
            parts.append(
                f"{role} {verdict}: {tests} tested ({failed} failed, {errored} errored), exit {exit_code(folder)}{died}"
            )
    by_code: dict[str, int] = defaultdict(int)
    for (_, check, code, _), _group in groups.items():
        by_code[f"{code} {check}"] += 1
    codes = ", ".join(f"{name} ×{n}" for name, n in sorted(by_code.items()))
    parts.append(f"{len(groups)} distinct findings" + (f" [{codes}]" if codes else ""))
    if errors:
        parts.append(f"{len(errors)} schemathesis errors")
    return "; ".join(parts)


def markdown(out: Path) -> str:
    groups, errors = collect(out)
    lines = ["# dpgate fuzz findings", ""]
    lines.append(summary(out))
    lines.append("")
    lines.append(
        "Each group is one (operation, check, failure code, response status); "
        f"up to {EXAMPLES_PER_GROUP} instances with different problem details are shown. "
        "Set BASE, ADMIN and ANALYST from target/fuzz/<role>/env (the server is gone "
        "after the run: start one and seed it as run.sh does to replay)."
    )
    by_operation: dict[str, list] = defaultdict(list)
    for key, group in groups.items():
        by_operation[key[0]].append((key, group))
    for operation in sorted(by_operation):
        lines += ["", f"## {operation}", ""]
        for (_, check, code, status), group in sorted(by_operation[operation], key=lambda item: (item[0][2] or "", item[0][1], str(item[0][3]))):
            failure = group["failure"]
            lines.append(
                f"### {code} {failure.get('title')} — check `{check}`, response {status} "
                f"({group['count']} cases; roles: {', '.join(sorted(group['roles']))}; "
                f"phases: {', '.join(sorted(p for p in group['phases'] if p))})"
            )
            for example in group["examples"].values():
                lines.append("")
                message = example["message"].strip().replace("\n", "\n    ")
                lines.append(f"- [{example['role']}] case {example['case']}: {message}")
                lines.append(f"  response: `{example['response']}`")
                lines.append("")
                lines.append("  ```sh")
                lines.append(f"  {example['curl']}")
                lines.append("  ```")
            lines.append("")
    if errors:
        lines += ["", "## Errors (schemathesis could not complete a test case)", ""]
        for group in errors.values():
            phases = ", ".join(sorted(p for p in group["phases"] if p))
            lines.append(
                f"- {group['label']} ({phases}; roles: {', '.join(sorted(group['roles']))}): "
                f"{group['kind']}: {group['message'].strip()}"
            )
            for role, line in group["curls"]:
                lines += ["", f"  [{role}]", "", "  ```sh", f"  {line}", "  ```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "--summary":
        print(summary(Path(argv[1])))
        return 0
    if len(argv) == 1:
        sys.stdout.write(markdown(Path(argv[0])))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

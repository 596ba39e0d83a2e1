#!/usr/bin/env bash
# The plugins at the newest releases of everything they depend on: for each plugin, a scratch
# virtual environment (uv.lock is never read nor written) resolved with `--resolution highest`
# and `--upgrade` (every dependency at the newest version the packages' own ranges allow),
# the dev tools added without moving those pins, then the plugin's tests. The resolved versions
# of the frameworks are printed first; a failure names them again, so a break on a new release
# says which release.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"

if command -v uv >/dev/null 2>&1; then
    UV=(uv)
else
    python3 -m pip install --quiet uv
    UV=(python3 -m uv)
fi

SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT

# The dev tools the tests need (the workspace's dev group; see .ci/dev_tools.py for what stays
# out and why).
DEV_TOOLS=()
while IFS= read -r line; do DEV_TOOLS+=("$line"); done < <(python3 .ci/dev_tools.py)

# The packages whose new releases can break a plugin (printed, and named on a failure).
WATCHED='^(pydantic|tiktoken|langchain|langchain-core|langchain-openai|langchain-anthropic|langgraph|langgraph-prebuilt|langgraph-checkpoint|langgraph-checkpoint-sqlite|langgraph-sdk|openai|openai-agents|anthropic|mcp|httpx|platformdirs|rich)=='

FAILED=()

# `package locked -> resolved` for each watched package the resolution moved past uv.lock.
newer_than_lock() {
    python3 - "$1" "$WATCHED" <<'PY'
import re
import sys
import tomllib

with open("uv.lock", "rb") as f:
    locked = {p["name"]: p.get("version") for p in tomllib.load(f).get("package", [])}
watched = re.compile(sys.argv[2], re.IGNORECASE)
moved = []
with open(sys.argv[1], encoding="utf-8") as f:
    for line in f:
        line = line.strip()
        if "==" not in line or not watched.match(line):
            continue
        name, version = line.split("==", 1)
        key = re.sub(r"[-_.]+", "-", name).lower()
        if locked.get(key) != version:
            moved.append(f"{key} {locked.get(key) or '(not locked)'} -> {version}")
print(", ".join(moved))
PY
}

run_highest() {
    local name="$1" tests
    read -r -a tests <<<"$2"
    shift 2
    local venv="$SCRATCH/$name"
    echo "== $name: highest resolution of $*"
    # The newest Python this machine has (the packages support 3.11 and later).
    local python
    for python in 3.14 3.13 3.12 3.11; do
        "${UV[@]}" venv --quiet --no-python-downloads --python "$python" "$venv" 2>/dev/null && break
    done
    [ -x "$venv/bin/python" ] || "${UV[@]}" venv --quiet --no-python-downloads "$venv"
    export VIRTUAL_ENV="$venv"
    local editables=()
    for package in "$@"; do editables+=(-e "$package"); done
    if ! "${UV[@]}" pip install --quiet --resolution highest --upgrade "${editables[@]}"; then
        echo "!! $name: no highest-version resolution of the plugin's dependencies" >&2
        FAILED+=("$name: resolution")
        unset VIRTUAL_ENV
        return
    fi
    "${UV[@]}" pip freeze --exclude-editable >"$venv/pins.txt" 2>/dev/null
    if ! "${UV[@]}" pip install --quiet --constraint "$venv/pins.txt" "${DEV_TOOLS[@]}"; then
        echo "!! $name: the dev tools do not install beside the newest releases" >&2
        FAILED+=("$name: dev tools")
        unset VIRTUAL_ENV
        return
    fi
    local versions
    versions="$("$venv/bin/python" --version 2>&1 | tr ' ' '=' | tr 'P' 'p') $(
        "${UV[@]}" pip list --format freeze 2>/dev/null | grep -Ei "$WATCHED" | tr '\n' ' '
    )"
    echo "$name: $versions"
    # The releases newer than the lock: where a failure comes from, when the locked
    # environment passes.
    local newer
    newer="$(newer_than_lock "$venv/pins.txt")"
    echo "$name: newer than uv.lock: ${newer:-none}"
    if ! (cd "$ROOT" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "${tests[@]}"); then
        echo "!! $name: ${tests[*]} failed with the releases newer than uv.lock: ${newer:-none}" >&2
        echo "!! $name: on $versions" >&2
        FAILED+=("$name: ${tests[*]} failed; newer than uv.lock: ${newer:-none}")
    fi
    unset VIRTUAL_ENV
}

# The plugin tests drive the plugins against the bench's replay provider (real HTTP): the
# bench and its dependencies (both plugins) are installed with them. One environment serves
# both plugins' tests: a separate one per plugin resolved to the same versions (only the
# LangGraph plugin's `sqlite` extra added three packages beside them), so it cost a second
# install and a second test session for nothing.
run_highest plugins "tests/langgraph tests/agents" \
    packages/core "packages/langgraph_plugin[langchain,sqlite]" packages/openai_agents_plugin \
    packages/bench

if [ "${#FAILED[@]}" -gt 0 ]; then
    echo "== newest releases: FAILED" >&2
    printf '   %s\n' "${FAILED[@]}" >&2
    exit 1
fi
echo "== newest releases: the plugins' tests pass"

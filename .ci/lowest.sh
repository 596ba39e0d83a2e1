#!/usr/bin/env bash
# The plugins at their lowest declared dependency versions: for each plugin, a scratch virtual
# environment resolved with `--resolution lowest-direct` (every dependency the workspace
# packages declare at its floor, everything else at the newest version that fits), the dev
# tools added without moving those pins, then the plugin's tests.
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

run_lowest() {
    local name="$1" tests
    read -r -a tests <<<"$2"
    shift 2
    local venv="$SCRATCH/$name"
    echo "== $name: lowest-direct resolution of $*"
    # The oldest Python the packages support, when this machine has it.
    "${UV[@]}" venv --quiet --no-python-downloads --python 3.11 "$venv" 2>/dev/null ||
        "${UV[@]}" venv --quiet --no-python-downloads "$venv"
    export VIRTUAL_ENV="$venv"
    local editables=()
    for package in "$@"; do editables+=(-e "$package"); done
    "${UV[@]}" pip install --quiet --resolution lowest-direct "${editables[@]}"
    "${UV[@]}" pip freeze --exclude-editable >"$venv/pins.txt"
    "${UV[@]}" pip install --quiet --constraint "$venv/pins.txt" "${DEV_TOOLS[@]}"
    "${UV[@]}" pip list --format freeze |
        grep -Ei '^(python|pydantic|tiktoken|langchain|langchain-core|langchain-openai|langgraph|langgraph-prebuilt|langgraph-checkpoint-sqlite|matplotlib|openai|openai-agents|platformdirs|rich)==' |
        tr '\n' ' '
    echo
    (cd "$ROOT" && "$venv/bin/python" -m pytest -q "${tests[@]}")
    unset VIRTUAL_ENV
}

# The plugin tests drive the plugins against the bench's replay provider (real HTTP): the
# bench and its dependencies (both plugins) are installed with them. One environment serves
# both plugins' tests: a separate one per plugin resolved to the same versions (only the
# LangGraph plugin's `sqlite` extra added three packages beside them), so it cost a second
# install and a second test session for nothing.
run_lowest plugins "tests/langgraph tests/agents" \
    packages/core "packages/langgraph_plugin[langchain,sqlite]" packages/openai_agents_plugin \
    packages/bench

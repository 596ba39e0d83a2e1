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

# The dev tools the tests need, from the workspace's own dev group (linters left out).
DEV_TOOLS=()
while IFS= read -r line; do DEV_TOOLS+=("$line"); done < <(
    python3 - <<'PY'
import tomllib

with open("pyproject.toml", "rb") as f:
    dev = tomllib.load(f)["dependency-groups"]["dev"]
print("\n".join(d for d in dev if not d.startswith(("ruff", "mypy"))))
PY
)

# The packages whose new releases can break a plugin (printed, and named on a failure).
WATCHED='^(pydantic|tiktoken|langchain|langchain-core|langchain-openai|langchain-anthropic|langgraph|langgraph-prebuilt|langgraph-checkpoint|langgraph-checkpoint-sqlite|langgraph-sdk|openai|openai-agents|anthropic|mcp|httpx|platformdirs|rich)=='

FAILED=()

run_highest() {
    local name="$1" tests="$2"
    shift 2
    local venv="$SCRATCH/$name"
    echo "== $name: highest resolution of $*"
    # The newest Python this machine has that the packages support.
    "${UV[@]}" venv --quiet --no-python-downloads --python ">=3.11" "$venv"
    export VIRTUAL_ENV="$venv"
    local editables=()
    for package in "$@"; do editables+=(-e "$package"); done
    if ! "${UV[@]}" pip install --quiet --resolution highest --upgrade "${editables[@]}"; then
        echo "!! $name: no highest-version resolution of the plugin's dependencies" >&2
        FAILED+=("$name: resolution")
        unset VIRTUAL_ENV
        return
    fi
    "${UV[@]}" pip freeze --exclude-editable >"$venv/pins.txt"
    if ! "${UV[@]}" pip install --quiet --constraint "$venv/pins.txt" "${DEV_TOOLS[@]}"; then
        echo "!! $name: the dev tools do not install beside the newest releases" >&2
        FAILED+=("$name: dev tools")
        unset VIRTUAL_ENV
        return
    fi
    local versions
    versions="$("$venv/bin/python" --version 2>&1 | tr ' ' '=' | tr 'P' 'p') $(
        "${UV[@]}" pip list --format freeze | grep -Ei "$WATCHED" | tr '\n' ' '
    )"
    echo "$name: $versions"
    if ! (cd "$ROOT" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "$tests"); then
        echo "!! $name: $tests failed on $versions" >&2
        FAILED+=("$name: $tests failed on $versions")
    fi
    unset VIRTUAL_ENV
}

# The plugin tests drive the plugins against the bench's replay provider (real HTTP): the
# bench and its dependencies (both plugins) are installed with each.
run_highest langgraph tests/langgraph \
    packages/core "packages/langgraph_plugin[langchain,sqlite]" packages/openai_agents_plugin \
    packages/bench
run_highest agents tests/agents \
    packages/core packages/openai_agents_plugin "packages/langgraph_plugin[langchain]" \
    packages/bench

if [ "${#FAILED[@]}" -gt 0 ]; then
    echo "== newest releases: FAILED" >&2
    printf '   %s\n' "${FAILED[@]}" >&2
    exit 1
fi
echo "== newest releases: the plugins' tests pass"

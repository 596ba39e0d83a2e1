"""Print the dev tools the plugin tests need, one per line: the workspace's dev group without
the linters, the docs site and deepagents (used by .ci/lowest.sh and .ci/highest.sh).

deepagents stays out of both scratch environments: at the plugins' floors it needs a newer
langchain-core, and at the newest releases its own dependencies (google-genai's tenacity pin)
do not install beside the newest langchain-core; its tests skip without it and run in the
locked environment.
"""

import tomllib

SKIP = ("ruff", "mypy", "mkdocs", "deepagents")

with open("pyproject.toml", "rb") as f:
    dev = tomllib.load(f)["dependency-groups"]["dev"]
print("\n".join(d for d in dev if not d.startswith(SKIP)))

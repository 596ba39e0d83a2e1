"""Print the dev tools the plugin tests need, one per line: the workspace's dev group without
the linters, the docs site, deepagents and the Gemini clients (used by .ci/lowest.sh and
.ci/highest.sh).

deepagents stays out of both scratch environments: at the plugins' floors it needs a newer
langchain-core, and at the newest releases its own dependencies (google-genai's tenacity pin)
do not install beside the newest langchain-core; its tests skip without it and run in the
locked environment. google-genai and langchain-google-genai (the Gemini client tests) stay out
for the same pin: google-genai caps tenacity below the version the plugins' floor of
langchain-core requires; their tests skip without them and run in the locked environment.
"""

import tomllib

SKIP = ("ruff", "mypy", "mkdocs", "deepagents", "google-genai", "langchain-google-genai")

with open("pyproject.toml", "rb") as f:
    dev = tomllib.load(f)["dependency-groups"]["dev"]
print("\n".join(d for d in dev if not d.startswith(SKIP)))

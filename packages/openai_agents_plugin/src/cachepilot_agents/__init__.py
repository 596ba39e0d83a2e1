"""cachepilot for the Agents SDK."""

"""cachepilot for LangGraph."""

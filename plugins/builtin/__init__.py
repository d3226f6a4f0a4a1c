"""The built-in plugins: one module per platform driver (and the LLM providers)."""

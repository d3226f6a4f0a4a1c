"""Platform drivers and LLM providers, as pluggy plugins (the contract arrives with installs)."""

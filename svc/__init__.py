"""The domain: models, rules and services. No web framework and no Ray here."""

"""Run config: YAML or a mapping to a validated, resolved config; the schema, ``_target_`` specs, resolvers, config differences."""

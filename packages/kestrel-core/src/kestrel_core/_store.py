# PLACEHOLDER (owner: core-runtime helper) — replaced wholesale
class InMemoryStore: pass

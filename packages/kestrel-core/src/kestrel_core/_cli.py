# PLACEHOLDER (owner: core-graph helper) — replaced wholesale
def main(argv=None): raise NotImplementedError

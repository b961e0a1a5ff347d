"""Stage 2: capability-targeted environments (built-in families, LLM synthesis, validation)."""


def builtin_families() -> dict[str, type]:
    """Capability name -> built-in environment class (single-turn families and stateful ones)."""
    from trace_agents.synthesis.families import FAMILIES
    from trace_agents.synthesis.lookup import LookupThenActEnv
    from trace_agents.synthesis.stateful import STATEFUL_FAMILIES

    return {**FAMILIES, **STATEFUL_FAMILIES, LookupThenActEnv.capability: LookupThenActEnv}


def target_families() -> dict[str, type]:
    """Capability name -> environment built from the target's own train tasks (`target/<capability>`)."""
    from trace_agents.synthesis.target_drills import TargetArgumentGroundingEnv, TargetFunctionSelectionEnv, TargetParallelCallsEnv

    return {cls.capability: cls for cls in (TargetFunctionSelectionEnv, TargetArgumentGroundingEnv, TargetParallelCallsEnv)}

"""trace-agents: TRACE (capability analysis -> environments -> adapters -> composition) for tool-using agents."""

import os

# No model hub at run time (DESIGN.md §8): without this, PEFT and transformers try to look names like
# "tiny-random" up online when saving adapters.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

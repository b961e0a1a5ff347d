from pathlib import Path

import pytest


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS from /proc (Linux)")
def test_release_memory_hands_freed_heap_pages_back_to_the_os():
    """Freed blocks with live ones above them stay in the heap (glibc only trims its top): the RSS of a
    long run then stays at its highest peak. release_memory must give those pages back."""
    from trace_agents.models import release_memory

    def rss_mb() -> float:
        line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith("VmRSS"))
        return int(line.split()[1]) / 1024

    blocks = [bytearray(100_000) for _ in range(3000)]  # ~300 MB of heap blocks (below the mmap threshold)
    keep = blocks[::10]  # a live block every 10: the heap cannot shrink from its top
    del blocks
    before = rss_mb()
    assert release_memory() is True
    assert before - rss_mb() > 100, "malloc_trim did not return the freed blocks' pages"
    del keep

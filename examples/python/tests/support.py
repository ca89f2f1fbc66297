"""What the tests read off a final answer."""

from __future__ import annotations

import re

CITATION = re.compile(r"\[cite:([^\]]+)\]")


def citations(answer: str) -> list[str]:
    """The tool call ids the answer cites, in order."""
    return CITATION.findall(answer)

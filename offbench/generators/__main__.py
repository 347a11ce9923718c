"""`python -m offbench.generators CARD_JSON OUT ERROR_FILE quiet|loud`: generate one card's dataset in this process,
its one-line error written to ERROR_FILE. The child `pinned_kernels.generate_in_child` starts on a board's kernels."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from offbench.data.cards import card_from_dict
from offbench.errors import OffbenchError
from offbench.generators import generate_from_card


def main(argv: list[str]) -> int:
    card_json, out, error, loudness = argv
    try:
        generate_from_card(card_from_dict(json.loads(card_json)), Path(out), quiet=loudness == "quiet")
    except OffbenchError as failure:
        Path(error).write_text(str(failure))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

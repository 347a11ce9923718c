"""`python -m offbench.generators CARD_JSON OUT quiet|loud ERROR_FILE`: generate one card's dataset in this process
(the child `pinned_kernels.generate_in_child` starts on a board's kernels), its one-line error written to ERROR_FILE."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from offbench.data.cards import card_from_dict
from offbench.generators import generate_from_card
from offbench.utils import child_main


def generate(args: list[str]) -> None:
    card_json, out, loudness = args
    generate_from_card(card_from_dict(json.loads(card_json)), Path(out), quiet=loudness == "quiet")


if __name__ == "__main__":
    sys.exit(child_main(generate, sys.argv[1:]))

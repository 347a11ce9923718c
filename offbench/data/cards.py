"""Dataset cards: one TOML file per dataset id, the single source of truth for where data comes from.

A card (see datasets/README.md for every field):

    id = "d4rl/hopper-medium-v2"
    description = "..."
    format = "d4rl"                      # how the downloaded file is laid out: offbench | d4rl | minari
    license = "CC BY 4.0"
    citation = "..."
    [source]                             # exactly one of: files, minari_id, recipe, import
    files = [{ url = "https://...", sha256 = "...", size = 123 }]
    [env]
    id = "Hopper-v4"                     # what evaluation recreates
    suite = "gymnasium"                  # gymnasium | offbench | metaworld | minigrid
    kwargs = {}
    [scores]
    ref_min = -20.272305                 # normalised score = 100 * (R - ref_min) / (ref_max - ref_min)
    ref_max = 3234.3

Built-in cards live in the repository's `datasets/`; users add theirs in `$OFFBENCH_HOME/datasets/`
(a user card with the same id overrides the built-in one). A user card that does not read or validate
is skipped with one warning per process naming the file, so it cannot stop every command; asking for
it by id (its `id`, or its path under the folder without `.toml`) still gives its error.
"""

from __future__ import annotations

import functools
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offbench.errors import OffbenchError
from offbench.paths import builtin_dir, user_cards_dir
from offbench.utils import read_text, safe_component

SOURCE_KINDS = ("files", "minari_id", "recipe", "import")  # import: {format, from}, written by `offbench import`


@dataclass(frozen=True)
class DatasetCard:
    id: str
    description: str
    format: str
    source: dict[str, Any]
    env: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, Any] = field(default_factory=dict)
    license: str = ""
    citation: str = ""
    kind: str = "offline"
    extra: dict[str, Any] = field(default_factory=dict)
    card_path: Path | None = None

    @property
    def source_kind(self) -> str:
        return next(k for k in SOURCE_KINDS if k in self.source)

    @property
    def ref_min_score(self) -> float | None:
        return self.scores.get("ref_min")

    @property
    def ref_max_score(self) -> float | None:
        return self.scores.get("ref_max")

    def normalise(self, returns: Any) -> Any:
        """D4RL's normalised score, 100 * (R - random) / (expert - random); None without reference scores."""
        if self.ref_min_score is None or self.ref_max_score is None:
            return None
        return 100.0 * (returns - self.ref_min_score) / (self.ref_max_score - self.ref_min_score)

    def to_dict(self) -> dict[str, Any]:
        """The card as TOML-ready data (what `card_path` holds)."""
        out: dict[str, Any] = {"id": self.id, "description": self.description, "format": self.format, "kind": self.kind}
        if self.license:
            out["license"] = self.license
        if self.citation:
            out["citation"] = self.citation
        out["source"] = self.source
        if self.env:
            out["env"] = self.env
        if self.scores:
            out["scores"] = self.scores
        out.update(self.extra)
        return out


_KNOWN_KEYS = {"id", "description", "format", "source", "env", "scores", "license", "citation", "kind"}


def card_from_dict(data: dict[str, Any], card_path: Path | None = None) -> DatasetCard:
    """Validate card data; errors name the card file and the problem."""
    where = str(card_path) if card_path else "card"
    for key in ("id", "description", "format", "source"):
        if key not in data:
            raise OffbenchError(f"{where}: missing required key '{key}'")
    if not isinstance(data["id"], str):
        raise OffbenchError(f"{where}: 'id' must be a string, got {data['id']!r}")
    for part in data["id"].split("/"):  # the id names the dataset's folder under $OFFBENCH_HOME/data
        safe_component(part, f"{where}: 'id' part")
    source = data["source"]
    if not isinstance(source, dict):
        raise OffbenchError(f"{where}: [source] must be a table")
    kinds = [k for k in SOURCE_KINDS if k in source]
    if len(kinds) != 1:
        raise OffbenchError(f"{where}: [source] needs exactly one of {', '.join(SOURCE_KINDS)}, found {kinds or 'none'}")
    if "files" in source:
        files = source["files"]
        if not isinstance(files, list) or not files:
            raise OffbenchError(f"{where}: source.files must be a non-empty list")
        for entry in files:
            if not isinstance(entry, dict) or not str(entry.get("url", "")).startswith(("http://", "https://")):
                raise OffbenchError(f"{where}: every source.files entry needs an http(s) 'url'")
            sha = entry.get("sha256")
            if sha is not None and (not isinstance(sha, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", sha)):
                raise OffbenchError(f"{where}: sha256 of {entry['url']} must be 64 hex characters")
            size = entry.get("size")
            if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
                raise OffbenchError(f"{where}: size of {entry['url']} must be a positive number of bytes, got {size!r}")
    if "recipe" in source:
        recipe = source["recipe"]
        if not isinstance(recipe, dict) or not isinstance(recipe.get("generator"), str):
            raise OffbenchError(f"{where}: source.recipe needs a 'generator' name")
        seed = recipe.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise OffbenchError(f"{where}: source.recipe.seed must be a non-negative integer, got {seed!r}")
        if not isinstance(recipe.get("params", {}), dict):
            raise OffbenchError(f"{where}: source.recipe.params must be a table")
    if "import" in source:
        imported = source["import"]
        if not isinstance(imported, dict) or not isinstance(imported.get("format"), str) or not isinstance(imported.get("from"), str):
            raise OffbenchError(f"{where}: source.import needs the 'format' and the 'from' (folder or URL) it was imported from")
    for key in ("env", "scores"):
        if key in data and not isinstance(data[key], dict):
            raise OffbenchError(f"{where}: [{key}] must be a table")
    env = data.get("env", {})
    if "id" in env and not isinstance(env["id"], str):
        raise OffbenchError(f"{where}: env.id must be a string")
    if not isinstance(env.get("kwargs", {}), dict):
        raise OffbenchError(f"{where}: env.kwargs must be a table")
    scores = data.get("scores", {})
    for key in ("ref_min", "ref_max"):
        if key in scores and (isinstance(scores[key], bool) or not isinstance(scores[key], (int, float))):
            raise OffbenchError(f"{where}: scores.{key} must be a number")
    if "ref_min" in scores and "ref_max" in scores and scores["ref_max"] == scores["ref_min"]:
        raise OffbenchError(f"{where}: scores.ref_max equals scores.ref_min")
    return DatasetCard(
        id=data["id"],
        description=str(data["description"]),
        format=str(data["format"]),
        source=source,
        env=data.get("env", {}),
        scores=scores,
        license=str(data.get("license", "")),
        citation=str(data.get("citation", "")),
        kind=str(data.get("kind", "offline")),
        extra={k: v for k, v in data.items() if k not in _KNOWN_KEYS},
        card_path=card_path,
    )


def read_card(path: Path) -> DatasetCard:
    try:
        data = tomllib.loads(read_text(path, "card"))
    except tomllib.TOMLDecodeError as exc:
        raise OffbenchError(f"{path}: malformed TOML ({exc})") from None
    return card_from_dict(data, path)


def write_card(card: DatasetCard, path: Path) -> Path:
    """Write a card atomically as TOML."""
    import tomli_w

    from offbench.utils import atomic_write_text

    return atomic_write_text(path, tomli_w.dumps(card.to_dict()))


def card_dirs() -> list[Path]:
    """Card folders in increasing priority: built-in, then the user's."""
    return [builtin_dir("datasets"), user_cards_dir()]


_warned: set[str] = set()  # broken user cards already reported in this process (their messages)


def _read_cards() -> tuple[dict[str, DatasetCard], dict[str, OffbenchError]]:
    """(valid cards by id, errors of broken user cards by every id they may stand for). A broken built-in
    card is a bug of this checkout and stays an error."""
    cards: dict[str, DatasetCard] = dict(builtin_cards())
    broken: dict[str, OffbenchError] = {}
    user = card_dirs()[1]
    for path in sorted(user.rglob("*.toml")) if user.is_dir() else []:
        try:
            card = read_card(path)
        except OffbenchError as exc:
            for dataset_id in _claimed_ids(path, user):
                broken[dataset_id] = exc
            continue
        cards[card.id] = card
    return dict(sorted(cards.items())), broken


@functools.cache
def builtin_cards() -> dict[str, DatasetCard]:
    """The checkout's own cards by id, read once per process: they ship with the code (user cards, which may change
    between calls, are read afresh each time)."""
    folder = card_dirs()[0]
    return {card.id: card for card in map(read_card, sorted(folder.rglob("*.toml")))} if folder.is_dir() else {}


def _claimed_ids(path: Path, folder: Path) -> set[str]:
    """The ids a card file that failed to validate may be meant for: its path under the folder, and its
    `id` if that much reads."""
    ids = {path.relative_to(folder).with_suffix("").as_posix()}
    try:
        stated = tomllib.loads(path.read_text(encoding="utf-8")).get("id")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        stated = None
    if isinstance(stated, str):
        ids.add(stated)
    return ids


def _warn_skipped(broken: dict[str, OffbenchError]) -> None:
    for error in broken.values():
        if str(error) in _warned:
            continue
        _warned.add(str(error))
        print(f"offbench: warning: skipping a user card: {error}", file=sys.stderr)


def all_cards() -> dict[str, DatasetCard]:
    """Every registered card by id (user cards override built-in ones with the same id); broken user cards
    are skipped with a warning."""
    cards, broken = _read_cards()
    _warn_skipped(broken)
    return cards


def get_card(dataset_id: str) -> DatasetCard:
    cards, broken = _read_cards()
    if dataset_id in broken:  # the card asked for is the broken one (a built-in of that id must not stand in)
        raise broken[dataset_id]
    _warn_skipped(broken)
    if dataset_id not in cards:
        close = [c for c in cards if dataset_id.split("/")[-1] in c][:5]
        if dataset_id.startswith(("/", ".", "~")) or dataset_id.endswith((".h5", ".hdf5")):
            raise OffbenchError(f"{dataset_id}: no such file or folder (nor a registered dataset id)")
        hint = f" (did you mean: {', '.join(close)}?)" if close else " (see `offbench list`)"
        raise OffbenchError(f"unknown dataset id '{dataset_id}'{hint}")
    return cards[dataset_id]

"""Dataset cards: one TOML file per dataset id, the single source of truth for where data comes from.

A card (see datasets/README.md for every field):

    id = "d4rl/hopper-medium-v2"
    description = "..."
    format = "d4rl"                      # how the downloaded file is laid out: offbench | d4rl | minari | mtdiff | xland
    license = "CC BY 4.0"
    citation = "..."
    [source]                             # exactly one of: files, minari_id, recipe, import
    files = [{ url = "https://...", sha256 = "...", size = 123 }]
    [env]
    id = "Hopper-v4"                     # what evaluation recreates
    suite = "gymnasium"                  # gymnasium | offbench | metaworld | minigrid | xland
    kwargs = {}
    [scores]
    ref_min = -20.272305                 # normalised score = 100 * (R - ref_min) / (ref_max - ref_min)
    ref_max = 3234.3

The card is the record `DatasetCard` (nested records for [source], its files / recipe / import, [env], [scores]),
read by `offbench.records`: each rule a card can break is one error line naming the file and the dotted field.
Its tables also read as the plain tables of the file (`card.env["id"]`, `dict(card.source)`) for the code that
passes them on as data.

Built-in cards live in the repository's `datasets/`; users add theirs in `$OFFBENCH_HOME/datasets/`
(a user card with the same id overrides the built-in one). A user card that does not read or validate
is skipped with one warning per process naming the file, so it cannot stop every command; asking for
it by id (its `id`, or its path under the folder without `.toml`) still gives its error.

A renamed card lists its old ids in `formerly`: `get_card` gives it for them too (run directories record the id
they were made from), `all_cards` lists it once, under its new id. A former id that is still a card's id, or that
two cards list, is an error at loading (for a user card: that card is skipped as broken).
"""

from __future__ import annotations

import functools
import re
import sys
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from offbench import records
from offbench.errors import OffbenchError
from offbench.paths import builtin_dir, user_cards_dir
from offbench.records import Invalid, ranged
from offbench.utils import atomic_write_text, safe_component

SOURCE_KINDS = ("files", "minari_id", "recipe", "import")  # import: {format, from}, written by `offbench import`


class TableView(Mapping[str, Any]):
    """A card table also read as the plain table its file holds (`card.env["id"]`, `dict(card.env)`, `**card.env`,
    `card.env == {...}`): environment factories, run records and stored cards take tables as data."""

    def __getitem__(self, key: str) -> Any:
        return records.to_dict(self)[key]

    def __iter__(self) -> Iterator[str]:
        return iter(records.to_dict(self))

    def __len__(self) -> int:
        return len(records.to_dict(self))


@dataclass(frozen=True)
class SourceFile:
    url: str = ranged(
        doc="Where to download it, http(s); a `--mirror` / `OFFBENCH_MIRROR` replaces its host. The last part "
        "of the URL path, percent-decoded, is the local file name and must be a safe file name (as for `id`)."
    )
    sha256: str | None = ranged(
        None,
        doc="Its checksum, 64 hex characters. Without it the downloader records the checksum of the "
        "first download once it has opened in its format (trust on first use) and checks it afterwards.",
    )
    size: int | None = ranged(
        None, ge=1, doc="Its size in bytes: a server that sends more is cut off as soon as it does (one-line error, nothing kept)."
    )
    checksum_source: str | None = ranged(None, doc="Where `sha256` and `size` were taken from.")
    link_source: str | None = ranged(None, doc="Where the URL was taken from.")

    def check(self) -> None:
        if not self.url.startswith(("http://", "https://")):
            raise Invalid(f"'url' must be an http(s) URL, got {self.url!r}")
        if self.sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", self.sha256):
            raise Invalid(f"'sha256' must be 64 hex characters, got {self.sha256!r}")


@dataclass(frozen=True)
class SourceRecipe:
    generator: str = ranged(doc="A name in offbench's generator registry; the data is generated on first use.")
    seed: int = ranged(0, ge=0, doc="The generator's seed.")
    params: dict[str, Any] = ranged(default_factory=dict, doc="The generator's own options.")


@dataclass(frozen=True)
class SourceImport:
    format: str = ranged(doc="The format imported, a name in `offbench.data.formats.FORMATS`.")
    from_: str = ranged(
        doc="The folder or URL imported. Nothing is fetched: when the data file is gone, offbench says which import command brings it back."
    )


@dataclass(frozen=True, eq=False)
class CardSource(TableView):
    files: list[SourceFile] | None = ranged(None, doc="Files to download (`[[source.files]]` tables, below).")
    minari_id: str | None = ranged(None, doc="A Minari remote dataset id, e.g. `mujoco/hopper/medium-v0` (every part a safe file name).")
    revision: str | None = ranged(None, doc="With `minari_id`: the revision of Minari's remote to fetch; `main` when left out.")
    recipe: SourceRecipe | None = ranged(None, doc="A generator recipe (`[source.recipe]`, below).")
    import_: SourceImport | None = ranged(None, doc="Written by `offbench import FORMAT SRC` (`[source.import]`, below).")

    @property
    def kind(self) -> str:
        """Which of SOURCE_KINDS this source is (`check` makes it exactly one)."""
        return self._given()[0]

    def _given(self) -> list[str]:
        return [key for key, value in zip(SOURCE_KINDS, (self.files, self.minari_id, self.recipe, self.import_)) if value is not None]

    def check(self) -> None:
        kinds = self._given()
        if len(kinds) != 1:
            raise Invalid(f"needs exactly one of {', '.join(SOURCE_KINDS)}, found {', '.join(kinds) or 'none'}")
        if self.files == []:
            raise Invalid("'files' must list at least one file")
        if self.revision is not None and self.minari_id is None:
            raise Invalid("'revision' applies to a minari_id source only")


@dataclass(frozen=True, eq=False)
class CardEnv(TableView):
    id: str | None = ranged(None, doc="The environment id, with its version (e.g. `Hopper-v4`).")
    suite: str | None = ranged(
        None,
        doc="The environment suite that makes it: `gymnasium` (when left out), `offbench`, `metaworld`, "
        "`minigrid`, `xland`, or one registered with `offbench.envs.factory.register_suite`.",
    )
    kwargs: dict[str, Any] | None = ranged(None, doc="Keyword arguments for making it.")
    note: str | None = ranged(None, doc="Free text, e.g. how the data's environment differs from this one.")


@dataclass(frozen=True, eq=False)
class CardScores(TableView):
    ref_min: float | None = ranged(None, doc="The return that scores 0 (D4RL: a random policy's).")
    ref_max: float | None = ranged(None, doc="The return that scores 100 (D4RL: an expert's).")
    source: str | None = ranged(None, doc="Where the numbers come from.")
    measured: str | None = ranged(None, doc="How they were measured, for numbers offbench measured itself.")

    def check(self) -> None:
        if (self.ref_min is None) != (self.ref_max is None):
            given, missing = ("ref_min", "ref_max") if self.ref_max is None else ("ref_max", "ref_min")
            raise Invalid(f"'{missing}' is missing: the normalised score needs both {given} and {missing}")
        if self.ref_min is not None and self.ref_max == self.ref_min:
            raise Invalid(f"'ref_max' must differ from ref_min, both are {self.ref_min} (the normalised score divides by their difference)")


VALIDATION_SOURCES = ("fresh", "unused", "train")  # where a learning-history card's validation tasks come from


@dataclass(frozen=True, eq=False)
class CardSplit(TableView):
    """A learning-history card's tasks: training, held-out (what boards report) and validation (what variants are
    chosen on). `offbench.envs.benchmarks` computes the lists from these keys and the recipe; docs/in-context-rl.md."""

    seed: int = ranged(
        0, ge=0, doc="The split's seed: held-out and training tasks come from it, validation tasks from a stream of their own."
    )
    rule: str | None = ranged(None, doc="The held-out rule in words.")
    variant: str | None = ranged(None, doc="Written at generation: the task distribution (bandits).")
    train: list[dict[str, Any]] | None = ranged(
        None, doc="Written at generation: the training tasks; a step's `task_id` is a position here."
    )
    held_out: list[dict[str, Any]] | int | None = ranged(
        None, doc="Written at generation: the held-out tasks (task k has id `len(train) + k`); an XLand card's: how many unused rulesets."
    )
    validation: int | None = ranged(
        None, ge=1, doc="How many validation tasks `--tasks validation` evaluates; give with `validation_from`."
    )
    validation_from: str | None = ranged(
        None,
        choices=VALIDATION_SOURCES,
        doc="`fresh`: new draws of a sampled task space (bandits) from the validation seed stream; `unused`: a seeded "
        "choice of the enumerated tasks that neither training nor held-out uses; `train`: a seeded choice of the "
        "training tasks (in distribution: the data has their histories).",
    )

    def check(self) -> None:
        if (self.validation is None) != (self.validation_from is None):
            given, missing = ("validation", "validation_from") if self.validation_from is None else ("validation_from", "validation")
            raise Invalid(f"'{missing}' is missing: a validation split needs both {given} and {missing}")


@dataclass(frozen=True, kw_only=True)
class DatasetCard:
    id: str = ranged(
        doc="The dataset id users type, e.g. `d4rl/hopper-medium-v2`. May contain `/` (it becomes sub-folders under "
        "`$OFFBENCH_HOME/data/`); every part between slashes is a safe file name: 1-128 of `A-Z a-z 0-9 . _ + -`, "
        "starting with a letter or digit."
    )
    formerly: list[str] = ranged(
        default_factory=list,
        doc="Ids the dataset had before it was renamed. Asking for one gives this card (`offbench list` shows only `id`), "
        "and data already on disk under a former id's folder is used rather than made again.",
    )
    description: str = ranged(doc="One or more sentences; `offbench list` shows the first line. Say how the data was made.")
    format: str = ranged(
        doc="How the downloaded payload is laid out: `offbench` (native HDF5), `d4rl` (flat HDF5), `minari` (Minari "
        "folder), `mtdiff` (MTDiff's folder of `{i}.npz` episodes, as an archive), `xland` (XLand-100B layout); a name "
        "in `offbench.data.formats.FORMATS`. Converted to the native format on first use, except formats read in "
        "place (`xland`: the verified download is the dataset, opened lazily)."
    )
    kind: str = ranged(
        "offline",
        doc="`offline`, `learning-history` (whole learning runs for in-context RL) or `multi-task`; it picks "
        "the evaluation protocol, and `offbench list --kind` filters on it.",
    )
    license: str | None = ranged(
        None,
        doc="The data licence as the publisher states it (e.g. `CC BY 4.0`). Left out when the publisher "
        "does not state one that we could check.",
    )
    citation: str | None = ranged(None, doc="What to cite when using the data.")
    source: CardSource = ranged(
        doc="Where the data comes from: exactly one of `files`, `minari_id`, `recipe`, `import` (`[source]`, below)."
    )
    env: CardEnv = ranged(default_factory=CardEnv, doc="What evaluation recreates (`[env]`, below).")
    scores: CardScores = ranged(default_factory=CardScores, doc="Reference returns for the normalised score (`[scores]`, below).")
    split: CardSplit | None = ranged(
        None, doc="Learning-history cards: their training, held-out and validation tasks (`[split]`, docs/in-context-rl.md)."
    )
    analogue: str | None = ranged(
        None,
        doc="The id of the published dataset this one re-makes (e.g. `d4rl/hopper-medium-v2` for "
        "`mujoco-local/hopper-medium`). A baseline with no standard config for this id takes the analogue's, so the "
        "hyper-parameters are the published ones for that kind of data.",
    )
    extra: dict[str, Any] = field(default_factory=dict)  # any other top-level key, kept and written back unchanged
    card_path: Path | None = field(default=None, init=False)  # the file it was read from: not a key of the card

    @property
    def source_kind(self) -> str:
        return self.source.kind

    @property
    def ref_min_score(self) -> float | None:
        return self.scores.ref_min

    @property
    def ref_max_score(self) -> float | None:
        return self.scores.ref_max

    def normalise(self, returns: Any) -> Any:
        """D4RL's normalised score, 100 * (R - random) / (expert - random); None without reference scores."""
        if self.ref_min_score is None or self.ref_max_score is None:
            return None
        return 100.0 * (returns - self.ref_min_score) / (self.ref_max_score - self.ref_min_score)

    def to_dict(self) -> dict[str, Any]:
        """The card as TOML-ready data (what `card_path` holds); an empty [env], [scores] or `formerly` is left out,
        as the card without one that it was read from."""
        return {key: value for key, value in records.to_dict(self).items() if value or key not in ("env", "scores", "formerly")}

    def check(self) -> None:
        for field_name, dataset_id in (("id", self.id), *(("formerly", former) for former in self.formerly)):
            for part in dataset_id.split("/"):  # an id names the dataset's folder under $OFFBENCH_HOME/data
                try:
                    safe_component(part, f"'{field_name}' part")
                except OffbenchError as exc:
                    raise Invalid(str(exc)) from None
        if self.id in self.formerly:
            raise Invalid(f"'formerly' names the card's own id '{self.id}'")
        if self.analogue == self.id:
            raise Invalid(f"'analogue' names the card's own id '{self.id}'")


CARD_RECORDS = (DatasetCard, CardSource, SourceFile, SourceRecipe, SourceImport, CardEnv, CardScores)  # documented in datasets/README.md


def _read_from(card: DatasetCard, path: Path | None) -> DatasetCard:
    object.__setattr__(card, "card_path", path)  # frozen, and not a key of the card: set once, right after reading
    return card


def card_from_dict(data: dict[str, Any], card_path: Path | None = None) -> DatasetCard:
    """Validate card data; errors name the card file and the dotted field."""
    return _read_from(records.from_dict(DatasetCard, data, str(card_path) if card_path else "card", extra=True), card_path)


def read_card(path: Path) -> DatasetCard:
    return _read_from(records.read_toml(path, DatasetCard, "card", extra=True), path)


def write_field_docs(page: Path | None = None) -> Path:
    """Regenerate the field tables of datasets/README.md from the card records' `doc=`s (tests/test_card_records.py
    fails while they differ)."""
    return records.write_field_tables(page or builtin_dir("datasets") / "README.md", *CARD_RECORDS)


def write_card(card: DatasetCard, path: Path) -> Path:
    """Write a card atomically as TOML."""
    import tomli_w

    return atomic_write_text(path, tomli_w.dumps(card.to_dict()))


def card_dirs() -> list[Path]:
    """Card folders in increasing priority: built-in, then the user's."""
    return [builtin_dir("datasets"), user_cards_dir()]


_warned: set[str] = set()  # broken user cards already reported in this process (their messages)


def _read_cards() -> tuple[dict[str, DatasetCard], dict[str, str], dict[str, OffbenchError]]:
    """(valid cards by id, former id -> the id it was renamed to, errors of broken user cards by every id they may
    stand for). A broken built-in card is a bug of this checkout and stays an error, as does a rename clash between
    built-in cards; a user card in a rename clash is broken."""
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
    while True:
        try:
            renamed = renamed_ids(cards)
            break
        except RenameClash as clash:
            faulty = next(((card, path) for card in clash.cards if (path := card.card_path) and path.is_relative_to(user)), None)
            if faulty is None:
                raise
            del cards[faulty[0].id]
            for dataset_id in _claimed_ids(faulty[1], user):
                broken[dataset_id] = clash
    return dict(sorted(cards.items())), renamed, broken


class RenameClash(OffbenchError):
    """A former id that two cards list, or that is still a card's id: `cards` are the two, the one at fault first."""

    def __init__(self, message: str, cards: tuple[DatasetCard, DatasetCard]):
        super().__init__(message)
        self.cards = cards


_ONE_ID = " (an id names one dataset: delete or change one of the two cards)"


def renamed_ids(cards: Mapping[str, DatasetCard]) -> dict[str, str]:
    """Former id -> the id of the card whose `formerly` lists it; a former id that is still a card's id, or that
    two cards list, would make an id mean two datasets (RenameClash, one line naming both files)."""
    renamed: dict[str, str] = {}
    for card in cards.values():
        for former in card.formerly:
            if former in cards:
                other = cards[former]
                raise RenameClash(
                    f"{card.card_path}: 'formerly' names '{former}', which is the id of {other.card_path}{_ONE_ID}", (card, other)
                )
            if former in renamed:
                other = cards[renamed[former]]
                raise RenameClash(
                    f"{card.card_path}: 'formerly' names '{former}', which {other.card_path} names too{_ONE_ID}", (card, other)
                )
            renamed[former] = card.id
    return renamed


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
    cards, _, broken = _read_cards()
    _warn_skipped(broken)
    return cards


def get_card(dataset_id: str) -> DatasetCard:
    """The card registered as `dataset_id`, or the one renamed from it (its `formerly`): run directories and
    scripts that name the old id keep working."""
    cards, renamed, broken = _read_cards()
    if dataset_id in broken:  # the card asked for is the broken one (a built-in of that id must not stand in)
        raise broken[dataset_id]
    _warn_skipped(broken)
    dataset_id = renamed.get(dataset_id, dataset_id)
    if dataset_id not in cards:
        close = [c for c in cards if dataset_id.split("/")[-1] in c][:5]
        if dataset_id.startswith(("/", ".", "~")) or dataset_id.endswith((".h5", ".hdf5")):
            raise OffbenchError(f"{dataset_id}: no such file or folder (nor a registered dataset id)")
        hint = f" (did you mean: {', '.join(close)}?)" if close else " (see `offbench list`)"
        raise OffbenchError(f"unknown dataset id '{dataset_id}'{hint}")
    return cards[dataset_id]

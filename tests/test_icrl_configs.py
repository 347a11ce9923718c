"""No learning-history card falls back to a config that cannot run on a small machine: for every ICRL card
(`bandit*`, `darkroom*`, `keydoor*`, and `contextual-bandit*` for AD) the standard file `offbench run baseline
ad|dpt` picks is a CPU-sized one, and its update fits in 24 GB by the memory estimate (offbench/training/memory.py),
while the published `default.toml` stays one `--config` away. DPT does not run on the contextual cards (its query is
a tabular state; a contextual bandit's state is a fresh context), so they are AD's only. XLand cards are not covered
here: there is no CPU-sized XLand config yet, and the memory check refuses the published one in one line before
anything is written."""

from __future__ import annotations

import pytest

from offbench.baselines import get_baseline
from offbench.data.cards import all_cards
from offbench.data.spec import DatasetSpec
from offbench.training.config import resolve_config, standard_config_path
from offbench.training.memory import estimate_update_bytes

MACHINE = 24 * 1024**3
FAMILY_DATA = {
    "bandit": "bandit-small",
    "darkroom": "darkroom-small",
    "keydoor": "keydoor-small",
    "contextual": "contextual-bandit-linucb-small",
}  # a small card's spec per family
FAMILIES = {"ad": set(FAMILY_DATA), "dpt": set(FAMILY_DATA) - {"contextual"}}  # DPT refuses contextual cards


def icrl_cards(name: str) -> list[str]:
    """The learning-history cards (XLand's aside) that baseline `name` runs on."""
    return sorted(cid for cid, card in all_cards().items() if card.kind == "learning-history" and cid.split("-")[0] in FAMILIES[name])


def test_the_icrl_cards_are_the_four_families_and_none_is_left_out():
    learning_histories = {cid for cid, card in all_cards().items() if card.kind == "learning-history" and not cid.startswith("xland")}
    assert set(icrl_cards("ad")) == learning_histories and len(learning_histories) >= 25
    assert {cid.split("-")[0] for cid in icrl_cards("dpt")} == FAMILIES["dpt"]


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_no_icrl_card_falls_back_to_the_published_default(name):
    for card_id in icrl_cards(name):
        path = standard_config_path(name, card_id)
        assert path.name != "default.toml", f"{name} on {card_id} falls back to {path}"
        assert path.parent.name == name


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    import os

    import offbench

    home = tmp_path_factory.mktemp("icrl_home")
    old = os.environ.get("OFFBENCH_HOME")
    os.environ["OFFBENCH_HOME"] = str(home)
    try:
        return {family: DatasetSpec.from_store(offbench.load(card)) for family, card in FAMILY_DATA.items()}
    finally:
        if old is None:
            del os.environ["OFFBENCH_HOME"]
        else:
            os.environ["OFFBENCH_HOME"] = old


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_every_icrl_standard_config_fits_24_gb(specs, name):
    cls = get_baseline(name)
    for card_id in icrl_cards(name):
        config = resolve_config(cls, card_id)
        estimate = estimate_update_bytes(cls, config, specs[card_id.split("-")[0]], "cpu")
        assert estimate.total < MACHINE / 8, (card_id, estimate.total)  # CPU-sized: a few GB at most


def test_the_published_ad_config_does_not_fit_24_gb_and_stays_one_config_away(specs):
    from offbench.paths import builtin_dir

    cls = get_baseline("ad")
    published = builtin_dir("baselines") / "ad" / "default.toml"
    config = resolve_config(cls, "darkroom", published)
    assert config.train.batch_size == 512 and config.baseline.hidden_dim == 512
    assert estimate_update_bytes(cls, config, specs["darkroom"], "cpu").total > MACHINE
    readme = (builtin_dir("baselines") / "README.md").read_text()
    assert "--config baselines/ad/default.toml" in readme and "--config baselines/dpt/default.toml" in readme


def test_the_icrl_card_table_lists_every_card_in_its_folder():
    from offbench.paths import builtin_dir

    folder = builtin_dir("datasets") / "icrl"
    rows = {line.split("|")[1].strip().strip("`") for line in (folder / "README.md").read_text().splitlines() if line.startswith("| `")}
    assert rows == {path.stem for path in folder.glob("*.toml")}

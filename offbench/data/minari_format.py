"""Minari's on-disk layout, read and written with plain h5py (the `minari` package is not needed).

Layout (checked against minari 0.5.4's `MinariStorage` and `HDF5Storage` source):

    <root>/<namespace>/<name>-v<N>/data/metadata.json    spaces (JSON strings), totals, dataset_id, ...
    <root>/<namespace>/<name>-v<N>/data/main_data.hdf5   one group `episode_{i}` per episode:
        attrs id, total_steps, optional seed
        observations (T + 1 rows: the reset observation first), actions, rewards, terminations,
        truncations (T rows), optional infos/ group (nested dicts become nested groups)

`detect` accepts the dataset folder, its `data/` folder, or the HDF5 file (with metadata.json beside it).

How an episode maps onto an EpisodeStore (nothing is dropped; dtypes are kept as found, so rewards that
Minari's DataCollector wrote as float64 stay float64 and compare bit-identical):

- observations[:T] -> observations, observations[T] -> final_observations (the last step keeps its s').
- actions, rewards, terminations, truncations -> the same arrays; the flags are copied, never merged.
- infos: Minari's DataCollector writes T + 1 rows per key, row 0 from `reset()` and row t + 1 from the
  `step()` that produced reward t. offbench keeps the step-aligned rows 1..T as the per-step column
  `infos/<key>` (so `columns["infos/success"][t]` is the info returned with rewards[t]) and row 0 as the
  per-episode column `reset_infos/<key>`. Infos with exactly T rows (allowed by
  `create_dataset_from_buffers`) are taken as step-aligned and have no reset row. Export writes the
  reset row back first when there is one, so both round trips give identical infos.
- the per-episode `seed` attribute -> episode column `seed` (uint64) when every episode has one.
  `options/*` attributes are not kept.
- Dict and Tuple spaces are flattened to one Box in `gymnasium.spaces.flatten` order (Discrete parts
  one-hot); the original space is kept, in Minari's JSON, in card["minari"]["original_observation_space"]
  (or ..._action_space). Export writes the flattened Box.
- JPEG-encoded image observations (Minari 0.5.4 encodes uint8 image spaces by default) are decoded with
  Pillow, as Minari does. Export writes raw arrays and `jpeg_encoding: false`, so nothing is lossy.

Export writes `<out>/<namespace>/<name>-v<N>/data/` (the dataset id is the card id with its namespace,
`-v0` added when it has no version: `minigrid/mt3-near-optimal` -> `minigrid/mt3-near-optimal-v0`),
claims `minari_version` "0.5.0" (the first release with this layout, so every 0.5.x reader accepts it),
and stores offbench's own card and the names of non-info columns in extra metadata keys
(`offbench_card`, `offbench_columns`), so that a round trip restores them. Non-info columns (task_id,
...) are written as infos, where Minari users can see them. `env_spec` is the gymnasium spec for a
gymnasium env, and for offbench's own, MiniGrid and Meta-World envs a spec that rebuilds them through
offbench's env factory (`recover_environment(task=...)`); `author` and `algorithm_name` name offbench and
the generator's behaviour for generated data; data that came from Minari carries its own back.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any, TypeGuard

import gymnasium as gym
import h5py
import numpy as np
from gymnasium.envs.registration import EnvSpec

from offbench.data.spaces import widest_space
from offbench.data.store import EpisodeStore, hdf5_node, open_hdf5
from offbench.errors import OffbenchError, require
from offbench.utils import atomic_dir

METADATA_FILE = "metadata.json"
MAIN_FILE = "main_data.hdf5"
REQUIRED_METADATA = ("dataset_id", "minari_version", "data_format", "total_episodes", "total_steps")
EXPORT_MINARI_VERSION = "0.5.0"
_STEP_KEYS = ("actions", "rewards", "terminations", "truncations")


# ---------------------------------------------------------------------------------------- spaces
def space_from_minari(spec: dict[str, Any]) -> gym.Space:
    """A space from Minari's JSON (minari.serialization), without importing minari."""
    kind = spec.get("type")
    if kind == "Box":
        dtype = np.dtype(spec["dtype"])
        return gym.spaces.Box(np.array(spec["low"], dtype), np.array(spec["high"], dtype), tuple(spec["shape"]), dtype)
    if kind == "Discrete":
        return gym.spaces.Discrete(int(spec["n"]), start=int(spec.get("start", 0)))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(spec["nvec"], dtype=spec.get("dtype", "int64"), start=spec.get("start"))
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(spec["n"])
    if kind == "Dict":
        return gym.spaces.Dict({key: space_from_minari(sub) for key, sub in spec["subspaces"].items()})
    if kind == "Tuple":
        return gym.spaces.Tuple([space_from_minari(sub) for sub in spec["subspaces"]])
    raise ValueError(f"space type {kind!r} is not supported")


def space_to_minari(space: gym.Space) -> dict[str, Any]:
    """Minari's JSON for a space (the same fields minari.serialization.serialize_space writes)."""
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "dtype": str(space.dtype),
            "shape": list(space.shape),
            "low": space.low.tolist(),
            "high": space.high.tolist(),
        }
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "dtype": "int64", "start": int(space.start), "n": int(space.n)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "dtype": str(space.dtype), "nvec": space.nvec.tolist(), "start": space.start.tolist()}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": space.n if isinstance(space.n, int) else list(space.n)}
    raise OffbenchError(f"space {space} cannot be written in Minari's format")


def _is_image_space(space: gym.Space) -> TypeGuard[gym.spaces.Box]:
    """Minari's rule (minari.dataset.minari_storage.is_image_space) for which spaces it JPEG-encodes."""
    return (
        isinstance(space, gym.spaces.Box)
        and len(space.shape) in (2, 3)
        and space.shape[0] >= 32
        and space.shape[1] >= 32
        and space.dtype == np.uint8
        and bool(np.all(space.low == 0))
        and bool(np.all(space.high == 255))
    )


def _read_leaf(node: h5py.Dataset, space: gym.Space, jpeg: bool) -> np.ndarray:
    if jpeg and _is_image_space(space) and node.ndim < 1 + len(space.shape):
        image = require("PIL.Image", "minari")
        return np.stack([np.asarray(image.open(io.BytesIO(np.asarray(buf).tobytes())), dtype=np.uint8) for buf in node[()]])
    return node[()]


def _read_flat(node: h5py.Group | h5py.Dataset | h5py.Datatype, space: gym.Space, jpeg: bool) -> np.ndarray:
    """Rows of a (possibly nested) space as a 2-D array in gymnasium.spaces.flatten's layout."""
    if isinstance(space, gym.spaces.Dict):
        group = hdf5_node(node, h5py.Group)
        return np.concatenate([_read_flat(group[key], sub, jpeg) for key, sub in space.spaces.items()], axis=1)
    if isinstance(space, gym.spaces.Tuple):
        group = hdf5_node(node, h5py.Group)
        return np.concatenate([_read_flat(group[f"_index_{i}"], sub, jpeg) for i, sub in enumerate(space.spaces)], axis=1)
    rows = _read_leaf(hdf5_node(node, h5py.Dataset), space, jpeg)
    if isinstance(space, gym.spaces.Discrete):
        return np.eye(int(space.n), dtype=space.dtype)[np.asarray(rows) - space.start]
    if isinstance(space, gym.spaces.MultiDiscrete):
        flat = np.asarray(rows).reshape(len(rows), -1)
        pairs = enumerate(zip(space.nvec.ravel(), space.start.ravel()))
        parts = [np.eye(int(n), dtype=space.dtype)[flat[:, i] - start] for i, (n, start) in pairs]
        return np.concatenate(parts, axis=1)
    return np.asarray(rows).reshape(len(rows), -1)


def _flattened(space: gym.Space) -> gym.Space:
    """Dict and Tuple spaces as the Box that gymnasium.spaces.flatten maps them to; others unchanged."""
    return gym.spaces.flatten_space(space) if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)) else space


def _read_space(node: h5py.Group | h5py.Dataset | h5py.Datatype, space: gym.Space, flat_space: gym.Space, jpeg: bool) -> np.ndarray:
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        return _read_flat(node, space, jpeg).astype(flat_space.dtype, copy=False)
    return _read_leaf(hdf5_node(node, h5py.Dataset), space, jpeg)


# ---------------------------------------------------------------------------------------- detect
def _locate(path: Path) -> tuple[Path, Path] | None:
    """(metadata.json, HDF5 file) for a dataset folder, its data/ folder, or the HDF5 file; None if not Minari.

    An HDF5 file of `episode_*` groups counts even without metadata.json, so that loading it can say what is missing.
    """
    path = Path(path)
    if path.is_file():
        return (path.parent / METADATA_FILE, path) if _has_episode_groups(path) else None
    for folder in (path / "data", path):
        meta, main = folder / METADATA_FILE, folder / MAIN_FILE
        if main.is_file() and (meta.is_file() or _has_episode_groups(main)):
            return meta, main
    return None


def _has_episode_groups(path: Path) -> bool:
    if not h5py.is_hdf5(path):
        return False
    try:
        with h5py.File(path, "r") as f:
            keys = list(f)
            return bool(keys) and all(key.startswith("episode_") for key in keys) and "format" not in f.attrs
    except OSError:
        return False


def detect_minari(path: Path) -> bool:
    return _locate(path) is not None


# ---------------------------------------------------------------------------------------- load
def _read_metadata(meta_path: Path) -> dict[str, Any]:
    if not meta_path.is_file():
        raise OffbenchError(f"{meta_path}: missing (a Minari dataset keeps it beside {MAIN_FILE})")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise OffbenchError(f"{meta_path}: not readable JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise OffbenchError(f"{meta_path}: expected a JSON object")
    missing = [key for key in REQUIRED_METADATA if key not in meta]
    if missing:
        raise OffbenchError(f"{meta_path}: missing metadata key(s) {', '.join(missing)}")
    if meta["data_format"] != "hdf5":
        raise OffbenchError(f"{meta_path}: data_format {meta['data_format']!r} is not supported (offbench reads Minari's 'hdf5' storage)")
    return meta


def _metadata_space(meta: dict[str, Any], key: str, meta_path: Path) -> gym.Space:
    """The space stored in metadata, else the one of the environment in env_spec (what Minari does)."""
    try:
        if key in meta:
            return space_from_minari(json.loads(meta[key]) if isinstance(meta[key], str) else meta[key])
        if "env_spec" not in meta:
            raise OffbenchError(f"{meta_path}: missing metadata key {key} (and no env_spec to recover it from)")
        spec = EnvSpec.from_json(meta["env_spec"])
        return getattr(gym.make(spec), key)
    except OffbenchError:
        raise
    except Exception as exc:  # a malformed space or an env that cannot be made: the user's file is at fault
        raise OffbenchError(f"{meta_path}: cannot read {key} ({exc.__class__.__name__}: {exc})") from None


def _read_infos(group: h5py.Group, prefix: str = "") -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for key, node in group.items():
        name = f"{prefix}{key}"
        if isinstance(node, h5py.Group):
            out.update(_read_infos(node, f"{name}/"))
        else:
            out[name] = node.asstr()[()] if h5py.check_string_dtype(node.dtype) else node[()]
    return out


def load_minari(path: Path) -> EpisodeStore:
    located = _locate(Path(path))
    if located is None:
        raise OffbenchError(f"{path}: not a Minari dataset (needs data/{METADATA_FILE} and data/{MAIN_FILE})")
    meta_path, h5_path = located
    meta = _read_metadata(meta_path)
    obs_space = _metadata_space(meta, "observation_space", meta_path)
    act_space = _metadata_space(meta, "action_space", meta_path)
    flat_obs, flat_act = _flattened(obs_space), _flattened(act_space)
    offbench_columns = set(meta.get("offbench_columns", []))
    episodes = _read_episodes(h5_path, meta, meta_path, obs_space, flat_obs, act_space, flat_act)
    info_keys, reset_keys = _check_episodes(episodes, meta, meta_path, h5_path)

    def cat(key: str) -> np.ndarray:
        return np.concatenate([ep[key] for ep in episodes])

    columns = {
        (key if key in offbench_columns else f"infos/{key}"): np.concatenate([ep["infos"][key] for ep in episodes]) for key in info_keys
    }
    episode_columns = {f"reset_infos/{key}": np.stack([ep["reset_infos"][key] for ep in episodes]) for key in reset_keys}
    seeds = [ep["seed"] for ep in episodes]
    if all(seed is not None for seed in seeds):
        episode_columns["seed"] = np.asarray(seeds, dtype=np.uint64)
    for name in meta.get("offbench_episode_columns", []):
        episode_columns[name] = np.stack([np.asarray(ep["attrs"][name]) for ep in episodes])
    lengths = np.array([len(ep["rewards"]) for ep in episodes], dtype=np.int64)
    return EpisodeStore(
        observations=np.concatenate([ep["observations"][:-1] for ep in episodes]),
        final_observations=np.stack([ep["observations"][-1] for ep in episodes]),
        actions=cat("actions"),
        rewards=cat("rewards"),
        terminations=cat("terminations").astype(bool, copy=False),
        truncations=cat("truncations").astype(bool, copy=False),
        episode_starts=np.concatenate([[0], np.cumsum(lengths)]),
        columns=columns,
        episode_columns=episode_columns,
        observation_space=flat_obs,
        action_space=flat_act,
        card=_card_from_metadata(meta, obs_space, act_space),
        path=h5_path,
    )


def _read_episodes(h5_path: Path, meta: dict[str, Any], meta_path: Path, obs_space, flat_obs, act_space, flat_act) -> list[dict[str, Any]]:
    """Every episode the metadata counts, each read whole; a missing or unreadable one is one line naming it."""
    jpeg = bool(meta.get("jpeg_encoding", True))  # minari 0.5.4 reads a missing key as True
    episodes: list[dict[str, Any]] = []
    with open_hdf5(h5_path) as f:
        total = int(meta["total_episodes"])
        if total < 1:
            raise OffbenchError(f"{meta_path}: total_episodes is {total}; offbench needs at least one episode")
        for i in range(total):
            where = f"{h5_path}: episode_{i}"
            if f"episode_{i}" not in f:
                raise OffbenchError(f"{where} is missing (metadata says {total} episodes)")
            try:
                episodes.append(_read_episode(f[f"episode_{i}"], obs_space, flat_obs, act_space, flat_act, jpeg, where))
            except KeyError as exc:
                raise OffbenchError(f"{where}: missing {exc.args[0]}") from None
            except (OSError, ValueError, TypeError) as exc:
                raise OffbenchError(f"{where}: unreadable ({exc.__class__.__name__}: {exc})") from None
    return episodes


def _check_episodes(episodes: list[dict[str, Any]], meta: dict[str, Any], meta_path: Path, h5_path: Path) -> tuple[Any, Any]:
    """(info keys, reset-info keys), the same in every episode, after checking the steps add up to total_steps."""
    total_steps = sum(len(ep["rewards"]) for ep in episodes)
    if total_steps != int(meta["total_steps"]):
        raise OffbenchError(f"{meta_path}: total_steps is {meta['total_steps']} but the episodes hold {total_steps} steps")
    info_keys = episodes[0]["infos"].keys()
    for i, ep in enumerate(episodes):
        if ep["infos"].keys() != info_keys:
            raise OffbenchError(f"{h5_path}: episode_{i} has info keys {sorted(ep['infos'])}, episode_0 has {sorted(info_keys)}")
    reset_keys = episodes[0]["reset_infos"].keys()
    if any(ep["reset_infos"].keys() != reset_keys for ep in episodes):
        raise OffbenchError(f"{h5_path}: some episodes have T + 1 info rows and others T; offbench needs one convention")
    return info_keys, reset_keys


def _read_episode(group, obs_space, flat_obs, act_space, flat_act, jpeg: bool, where: str) -> dict[str, Any]:
    ep: dict[str, Any] = {key: group[key][()] for key in ("rewards", "terminations", "truncations")}
    steps = len(ep["rewards"])
    ep["observations"] = _read_space(group["observations"], obs_space, flat_obs, jpeg)
    ep["actions"] = _read_space(group["actions"], act_space, flat_act, jpeg)
    if len(ep["observations"]) != steps + 1:
        raise OffbenchError(f"{where}: {len(ep['observations'])} observations for {steps} steps (Minari stores T + 1)")
    for key in ("actions", "terminations", "truncations"):
        if len(ep[key]) != steps:
            raise OffbenchError(f"{where}: {key} has {len(ep[key])} rows, rewards has {steps}")
    infos = _read_infos(group["infos"]) if "infos" in group else {}
    ep["infos"], ep["reset_infos"] = {}, {}
    for key, rows in infos.items():
        if len(rows) == steps + 1:
            ep["reset_infos"][key], ep["infos"][key] = rows[0], rows[1:]
        elif len(rows) == steps:
            ep["infos"][key] = rows
        else:
            raise OffbenchError(f"{where}: infos/{key} has {len(rows)} rows for {steps} steps (expected {steps} or {steps + 1})")
    seed = group.attrs.get("seed")
    ep["seed"] = None if seed is None else int(seed)
    ep["attrs"] = dict(group.attrs)
    return ep


def _card_from_metadata(meta: dict[str, Any], obs_space: gym.Space, act_space: gym.Space) -> dict[str, Any]:
    if "offbench_card" in meta:
        return dict(meta["offbench_card"])
    kept = ("dataset_id", "minari_version", "algorithm_name", "author", "author_email", "code_permalink",
            "env_spec", "eval_env_spec", "requirements", "description")  # fmt: skip
    minari = {key: meta[key] for key in kept if key in meta}
    for name, space in (("observation", obs_space), ("action", act_space)):
        if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
            minari[f"original_{name}_space"] = meta[f"{name}_space"]
            minari["note"] = "Dict/Tuple spaces were flattened to a Box in gymnasium.spaces.flatten order"
    card: dict[str, Any] = {"id": meta["dataset_id"], "format": "minari", "minari": minari}
    if meta.get("description"):
        card["description"] = meta["description"]
    if meta.get("ref_min_score") is not None and meta.get("ref_max_score") is not None:
        card["scores"] = {"ref_min": float(meta["ref_min_score"]), "ref_max": float(meta["ref_max_score"])}
    return card


# ---------------------------------------------------------------------------------------- export
def minari_dataset_id(card_id: str | None) -> str:
    """A valid Minari id ((namespace/)name-v<N>, namespaces may nest) from an offbench card id, which keeps its namespace."""
    name = re.sub(r"[^-_\w/]", "-", card_id or "offbench/dataset").strip("/") or "offbench/dataset"
    return name if re.search(r"-v\d+$", name) else f"{name}-v0"


FACTORY_ENTRY_POINT = "offbench.envs.factory:make_env"
CARRIED_METADATA = ("algorithm_name", "author", "author_email", "code_permalink", "env_spec", "eval_env_spec", "requirements")
GENERATED_BEHAVIOUR = {"metaworld": "scripted expert", "minigrid": "planner", "pendulum-scripted": "scripted controller"}


def _env_spec_json(card: dict[str, Any]) -> str | None:
    """The gymnasium EnvSpec of the card's env as JSON (Minari's recover_environment uses it), if it has one.

    A gymnasium env gives its registered spec. Other suites (offbench's own, MiniGrid, Meta-World) give a spec
    whose entry point is offbench's env factory with the card's [env] table, so `gym.make(spec, task=...)` (in
    Minari: `dataset.recover_environment(task=...)`) rebuilds one task's environment, as evaluation does; no
    task is chosen for the user, since the data spans many.
    """
    env = card.get("env") or {}
    if not env.get("id"):
        return None
    suite = env.get("suite", "gymnasium")
    try:
        if suite == "gymnasium":
            text = gym.spec(env["id"]).to_json()
        else:
            env_id = env["id"] if "/" in env["id"] else f"{suite}/{env['id']}"
            spec = EnvSpec(env_id, FACTORY_ENTRY_POINT, kwargs={"env_spec": env}, order_enforce=False, disable_env_checker=True)
            text = spec.to_json()
        EnvSpec.from_json(text)
        return text
    except Exception:  # not registered here, or not JSON-serialisable: Minari then uses the stored spaces
        return None


def _provenance(card: dict[str, Any]) -> dict[str, Any]:
    """Who made the data and how: for a dataset that came from Minari, its own metadata (author, algorithm,
    env spec, ...); for generated data, offbench and the recipe's behaviour (a learning history's source
    algorithm, the multi-task expert or planner)."""
    original = card.get("minari") or (card.get("import") or {}).get("minari") or {}  # read from Minari, or downloaded from it
    if original:
        return {key: original[key] for key in CARRIED_METADATA if key in original}
    recipe = (card.get("source") or {}).get("recipe")
    if not recipe:
        return {}
    algorithm = (recipe.get("params") or {}).get("algo") or GENERATED_BEHAVIOUR.get(recipe.get("generator"))
    return {"author": ["offbench"], **({"algorithm_name": str(algorithm)} if algorithm else {})}


def export_minari(store: EpisodeStore, out: Path) -> Path:
    """Write `store` as `<out>/<dataset_id>/data/`; refuses to replace an existing dataset."""
    dataset_id = minari_dataset_id(store.card.get("id"))
    target = Path(out) / dataset_id
    if target.exists():
        raise OffbenchError(f"{target}: already exists; remove it or choose another --out")
    obs_space = store.observation_space or widest_space(store.observations[:1])
    act_space = store.action_space or widest_space(store.actions[:1])
    info_columns, extra_columns = _split_columns(store)
    extra_episode = [name for name in store.episode_columns if name != "seed" and not name.startswith("reset_infos/")]
    meta: dict[str, Any] = {
        "dataset_id": dataset_id,
        "minari_version": EXPORT_MINARI_VERSION,
        "data_format": "hdf5",
        "jpeg_encoding": False,
        "total_episodes": store.num_episodes,
        "total_steps": store.num_transitions,
        "observation_space": json.dumps(space_to_minari(obs_space)),
        "action_space": json.dumps(space_to_minari(act_space)),
        "requirements": [],
        "offbench_card": store.card,
        "offbench_columns": extra_columns,
        "offbench_episode_columns": extra_episode,
    }
    if store.card.get("description"):
        meta["description"] = store.card["description"]
    scores = store.card.get("scores") or {}
    if "ref_min" in scores and "ref_max" in scores:
        meta["ref_min_score"], meta["ref_max_score"] = scores["ref_min"], scores["ref_max"]
    env_spec = _env_spec_json(store.card)
    if env_spec:
        meta["env_spec"] = env_spec
    meta.update(_provenance(store.card))
    with atomic_dir(target, need=store.nbytes + store.final_observations.nbytes) as tmp:  # observations gain a row per episode
        (tmp / "data").mkdir()
        with h5py.File(tmp / "data" / MAIN_FILE, "w", track_order=True) as f:
            for i in range(store.num_episodes):
                _write_episode(f, store, i, {**info_columns, **{name: name for name in extra_columns}}, extra_episode)
        meta["dataset_size"] = round((tmp / "data" / MAIN_FILE).stat().st_size / 1e6, 1)
        (tmp / "data" / METADATA_FILE).write_text(json.dumps(meta))
    return target


def _split_columns(store: EpisodeStore) -> tuple[dict[str, str], list[str]]:
    """(info key -> column name for infos/* columns, names of other columns), refusing name clashes."""
    infos = {name.removeprefix("infos/"): name for name in store.columns if name.startswith("infos/")}
    extra = [name for name in store.columns if not name.startswith("infos/")]
    clash = sorted(set(infos) & set(extra))
    if clash:
        raise OffbenchError(f"columns {clash} exist both as infos/<name> and <name>; Minari has one infos namespace")
    return infos, extra


def _write_episode(f: h5py.File, store: EpisodeStore, i: int, info_columns: dict[str, str], extra_episode: list[str]) -> None:
    lo, hi = int(store.episode_starts[i]), int(store.episode_starts[i + 1])
    group = f.create_group(f"episode_{i}")
    group.attrs["id"] = i
    group.attrs["total_steps"] = hi - lo
    if "seed" in store.episode_columns:
        group.attrs["seed"] = store.episode_columns["seed"][i]
    for name in extra_episode:
        group.attrs[name] = store.episode_columns[name][i]
    group["observations"] = np.concatenate([store.observations[lo:hi], store.final_observations[i : i + 1]])
    for key in _STEP_KEYS:
        group[key] = np.asarray(getattr(store, key)[lo:hi])
    for key, column in info_columns.items():
        rows = np.asarray(store.columns[column][lo:hi])
        reset = store.episode_columns.get(f"reset_infos/{key}")
        if reset is not None:
            rows = np.concatenate([np.asarray(reset[i : i + 1]), rows])
        group.create_dataset(f"infos/{key}", data=rows.astype(h5py.string_dtype()) if rows.dtype.kind == "U" else rows)

"""XLand-100B and XLand-Trivial-20B (Nikulin et al. 2024), read in place: no conversion, lazy, chunk-aware.

The published layout, checked against dunnolab/xland-minigrid-datasets (README "What's inside";
collection/training/train.py, which writes one task's file; collection/combine.py, which merges them):

    /<k>                   one group per task, k = "0" .. "N-1" (consecutive after combine.py's filtering)
        attrs: env-id (e.g. "XLand-MiniGrid-R1-9x9"), benchmark-id ("trivial-1m" | "medium-1m"), ruleset-id
        states          uint8   (H, T, 5, 5)  agent's 5x5 view before the step, tile * NUM_COLORS + colour
        actions         uint8   (H, T)        0..5
        rewards         float16 (H, T)
        dones           bool    (H, T)        timestep.last() after the step (goal reached or time limit)
        expert_actions  uint8   (H, T)        the final policy's mode on states[t] (DPT labels)
    every dataset gzip level 6, chunks (1, 4096, ...) along the steps of one history

H = 32 histories per task; T = 60,928 (Trivial: 119 PPO updates x 512 steps) or 121,856 (100B: 476 x 256).
Histories are whole, unsplit PPO learning histories with auto-reset: states[t + 1] after a done is the next
episode's first observation (the terminal observation is not stored), and `dones` does not say whether
the goal or the time limit ended the episode. A window of steps may cross episode boundaries (that is
what Algorithm Distillation trains on).

Modules: `codec` (constants, the packed-state codec), `layout` (the published layout and `scan_layout`, the
metadata check every open runs; a pass is remembered per file path, size and modification time, `file_facts`),
`reader` (`ChunkReader`: whole HDF5 chunks, `read_direct_chunk` + zlib, in an LRU cache bounded in bytes, the
file opened once per process (HDF5 handles must not cross a fork), every decompressed chunk checked by `check_chunk`), `histories` (`XLandHistories`,
the dataset, holding only the file's shape; `XLandFormat`, its registry entry), `samplers` (`ad_windows` and
`dpt` read in place, registered on import) and `synthetic` (`write_xland_file`, small files for tests).
Observations are decoded to (5, 5, 2) = (tile, colour), as `np.divmod(states, NUM_COLORS)` in the authors'
loaders.
"""

from offbench.data.xland.codec import (
    NUM_ACTIONS,
    NUM_COLORS,
    NUM_TILES,
    VIEW,
    decode_states,
    decode_states_as,
    encode_states,
    max_episode_steps,
)
from offbench.data.xland.histories import XLandFormat, XLandHistories
from offbench.data.xland.layout import ATTRS, LAYOUT, Layout, Problem, detect_xland, scan_layout
from offbench.data.xland.reader import DEFAULT_CACHE_MB, ChunkReader, check_chunk
from offbench.data.xland.samplers import XLandADWindowSampler, XLandDPTSampler
from offbench.data.xland.synthetic import write_xland_file

__all__ = [
    "ATTRS",
    "DEFAULT_CACHE_MB",
    "LAYOUT",
    "NUM_ACTIONS",
    "NUM_COLORS",
    "NUM_TILES",
    "VIEW",
    "ChunkReader",
    "Layout",
    "Problem",
    "XLandADWindowSampler",
    "XLandDPTSampler",
    "XLandFormat",
    "XLandHistories",
    "check_chunk",
    "decode_states",
    "decode_states_as",
    "detect_xland",
    "encode_states",
    "max_episode_steps",
    "scan_layout",
    "write_xland_file",
]

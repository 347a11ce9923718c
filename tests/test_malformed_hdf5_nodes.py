"""HDF5 files whose names hold the wrong kind of object (a group where the layout has an array, an array where it
has a group, a scalar where it has rows): one line naming the file and the node, never a traceback."""

from __future__ import annotations

import dataclasses
import re

import h5py
import numpy as np
import pytest
from helpers import make_store

from offbench.data.formats import load_path
from offbench.data.spec import DatasetSpec
from offbench.data.store import native_header
from offbench.errors import OffbenchError


@pytest.fixture
def native(tmp_path):
    return make_store().save(tmp_path / "data.h5")


def edited(path, edit):
    with h5py.File(path, "r+") as f:
        edit(f)
    return path


def array_to_group(name):
    def edit(f):
        del f[name]
        f.create_group(name)

    return edit


def test_a_group_where_a_core_array_belongs_is_named(native):
    edited(native, array_to_group("actions"))
    with pytest.raises(OffbenchError, match=re.escape(f"{native}: /actions is an HDF5 group, expected an array (dataset)")):
        load_path(native)
    with pytest.raises(OffbenchError, match="/actions is an HDF5 group"):
        native_header(native)


def test_an_array_where_the_columns_group_belongs_is_named(native):
    edited(native, lambda f: f.create_dataset("columns", data=np.zeros(10)))
    with pytest.raises(OffbenchError, match=re.escape(f"{native}: /columns is an HDF5 dataset, expected a group")):
        load_path(native)


def test_a_scalar_column_has_no_rows(native):
    edited(native, lambda f: f.create_dataset("columns/task_id", data=np.int64(0)))
    with pytest.raises(
        OffbenchError, match=re.escape(f"{native}: unreadable dataset (array /columns/task_id has no rows (a scalar or empty dataspace))")
    ):
        load_path(native)


def test_a_d4rl_step_key_that_is_a_group_is_named(tmp_path):
    path = tmp_path / "d4rl.hdf5"
    with h5py.File(path, "w") as f:
        for key, value in {
            "observations": np.zeros((3, 2)),
            "actions": np.zeros((3, 1)),
            "rewards": np.zeros(3),
            "terminals": np.zeros(3, bool),
        }.items():
            f[key] = value
        f.create_group("timeouts")
    with pytest.raises(OffbenchError, match=re.escape(f"{path}: /timeouts is an HDF5 group, expected an array (dataset)")):
        load_path(path, "d4rl")


def test_a_spec_needs_an_action_space_of_fixed_shape():
    store = dataclasses.replace(make_store(), action_space=None)
    with pytest.raises(OffbenchError, match="a baseline sizes its networks by an action space of fixed shape, got None"):
        DatasetSpec.from_store(store)

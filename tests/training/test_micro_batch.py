"""Gradient accumulation (`micro_batch`, offbench/baselines/base.py MicroBatching): one update in micro-batches steps
every network as one update on the whole batch does, for every baseline that can split its batch; the others
refuse micro_batch in one line.

Equal means: parameters, the gradients the update left, optimiser moments and every other tensor of state_dict()
within rtol 1e-5 / atol 1e-6 (float32 sums taken in another order), logged losses within 1e-5. Dropout is set to 0:
other micro-batch shapes draw other dropout masks, so with dropout on the two updates agree only in distribution.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from baseline_contract import tiny
from test_protocols import contract_store

from offbench.baselines import BASELINES, get_baseline
from offbench.baselines.base import accumulate_backward, micro_batch_refusal, micro_batches
from offbench.data.samplers import make_sampler
from offbench.data.spec import DatasetSpec
from offbench.errors import OffbenchError
from offbench.training.config import resolve_config
from offbench.training.trainer import check_micro_batch

RTOL, ATOL = 1e-5, 1e-6


def without_dropout(config):
    """`config` with every dropout field at 0 (DT's three, AD's and Headless-AD's three, DPT's one)."""
    return dataclasses.replace(config, **{f.name: 0.0 for f in dataclasses.fields(config) if f.name.endswith("dropout")})


def splitting(name: str) -> bool:
    cls = get_baseline(name)
    return micro_batch_refusal(cls, tiny(name, cls)) is None


SPLITTING = [name for name in sorted(BASELINES) if splitting(name)]
REFUSING = [name for name in sorted(BASELINES) if not splitting(name)]


def assert_same(a, b, where: str = "state") -> None:
    """Nested states (dicts, lists, tensors, numbers) equal, tensors within the module's tolerance."""
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, rtol=RTOL, atol=ATOL, msg=lambda m: f"{where}: {m}")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            assert_same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def one_update(cls, config, spec, batch, micro_batch):
    """(state_dict, gradients left, logged losses) of a fresh baseline after one update on `batch`."""
    torch.manual_seed(0)
    baseline = cls(dataclasses.replace(config), spec)
    baseline.micro_batch = micro_batch
    torch.manual_seed(1)
    logged = baseline.update(batch)
    grads = [
        p.grad
        for value in vars(baseline).values()
        for p in (value.parameters() if isinstance(value, torch.nn.Module) else [value])
        if isinstance(p, torch.nn.Parameter)
    ]
    return baseline.state_dict(), grads, logged


@pytest.mark.parametrize("rows, micro_batch", [(16, 4), (10, 4)], ids=["batch/4", "uneven 4+4+2"])
@pytest.mark.parametrize("name", SPLITTING)
def test_an_update_in_micro_batches_equals_the_whole_batch_update(name, rows, micro_batch, pendulum):
    cls = get_baseline(name)
    store = contract_store(name, pendulum)
    spec = DatasetSpec.from_store(store)
    config = without_dropout(tiny(name, cls))
    probe = cls(config, spec)
    batch = make_sampler(cls.sampler, store, rows, 0, **(probe.sampler_options() if hasattr(probe, "sampler_options") else {})).sample()
    whole, split = (one_update(cls, config, spec, batch, size) for size in (None, micro_batch))
    assert_same(whole[0], split[0])
    assert_same(whole[1], split[1], "gradients")
    assert split[2] == pytest.approx(whole[2], rel=1e-5, abs=1e-7)


def test_headless_ad_draws_the_action_embeddings_of_the_whole_batch_before_splitting_it(pendulum):
    """Each row's random action embeddings are the same however the batch is split, also where drawing them per
    micro-batch would take other numbers from the stream (5 actions x embedding_dim 7 per row)."""
    cls = get_baseline("headless-ad")
    store = contract_store("headless-ad", pendulum)
    config = without_dropout(dataclasses.replace(tiny("headless-ad", cls), embedding_dim=7))
    spec = DatasetSpec.from_store(store)
    batch = make_sampler(cls.sampler, store, 10, 0, window_length=config.context_steps).sample()
    whole, split = (one_update(cls, config, spec, batch, size) for size in (None, 3))
    assert_same(whole[0], split[0])


def test_micro_batches_are_weighted_by_their_share_of_what_the_loss_averages():
    """A loss averaged over real steps (the DT family's) on rows of 1 to 5 real steps, in parts of 4, 4 and 2 rows: the
    parts' gradients add up to the whole batch's only when each is weighted by its share of the real steps."""
    generator = torch.Generator().manual_seed(0)
    weight = torch.nn.Parameter(torch.randn(3, generator=generator))
    batch = {
        "x": torch.randn(10, 5, 3, generator=generator),
        "mask": torch.arange(5) < torch.tensor([1, 5, 2, 5, 3, 4, 1, 5, 2, 3])[:, None],
    }

    def loss_fn(part):
        return {"loss": ((part["x"] @ weight) ** 2)[part["mask"]].mean()}

    whole = accumulate_backward(loss_fn, batch, None)["loss"]
    expected, weight.grad = weight.grad, None
    split = accumulate_backward(loss_fn, batch, 4, lambda part: part["mask"].sum())["loss"]
    assert [len(part["x"]) for part in micro_batches(batch, 4)] == [4, 4, 2]
    torch.testing.assert_close(weight.grad, expected, rtol=RTOL, atol=ATOL)
    torch.testing.assert_close(split, whole, rtol=RTOL, atol=ATOL)
    weight.grad = None
    accumulate_backward(loss_fn, batch, 4)  # weighted by rows: not the whole batch's gradient here
    assert not torch.allclose(weight.grad, expected, rtol=1e-3)


@pytest.mark.parametrize("name", REFUSING)
def test_a_baseline_that_cannot_split_its_batch_refuses_micro_batch_in_one_line(name):
    cls = get_baseline(name)
    config = resolve_config(cls, None, None, ["batch_size=16", "micro_batch=4"])
    with pytest.raises(OffbenchError) as refused:
        check_micro_batch(cls, config)
    assert len(str(refused.value).splitlines()) == 1 and "micro_batch = 4" in str(refused.value) and name in str(refused.value)


@pytest.mark.parametrize("name", ["bc", "dt", "moore-bc", "moore-iql", "prompt-dt"])
def test_gradient_surgery_couples_the_batch_and_refuses_micro_batch(name):
    """PCGrad projects each task's gradient of the whole batch off the others': no sum over micro-batches equals it."""
    cls = get_baseline(name)
    config = resolve_config(cls, None, None, ["gradient=pcgrad", "batch_size=16", "micro_batch=4"])
    with pytest.raises(
        OffbenchError, match=r"^config: micro_batch = 4: .* cannot take its gradient in micro-batches: gradient=pcgrad projects"
    ):
        check_micro_batch(cls, config)
    check_micro_batch(cls, resolve_config(cls, None, None, ["gradient=pcgrad", "batch_size=16", "micro_batch=16"]))  # nothing split


def test_a_run_trains_in_micro_batches_and_records_them(pendulum, cli, tmp_path):
    from helpers import read_jsonl
    from tiny_runs import run_args

    code, _, err = cli(*run_args("bc", "pendulum-scripted", tiny=True, steps=10, micro_batch=5, eval_episodes=0, out=tmp_path, name="run"))
    assert code == 0, err
    assert read_jsonl(tmp_path / "run" / "metrics.jsonl")[-1]["step"] == 10
    import json

    assert json.loads((tmp_path / "run" / "run.json").read_text())["config"]["micro_batch"] == 5

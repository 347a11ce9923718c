"""T2MIR (`moe = "t2mir"` on AD and DPT): the routers' top-k, the load-balancing term, the contrastive task loss,
the two mixtures' concatenated outputs, the dense model recovered with one expert per mixture, the routing terms in
the update's objective and log, the configs sized to the dense models' active parameters, and both baselines'
contract, on tiny models and darkroom-small."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import torch
from helpers import TRAINING_CONFIGS, assert_resume_repeats_the_run, logged_metrics

from offbench.baselines import get_baseline
from offbench.baselines.base import micro_batch_refusal
from offbench.baselines.nets import (
    Router,
    T2MIRFeedForward,
    active_parameters,
    contrastive_task_loss,
    load_balancing_loss,
    top_k_gates,
)
from offbench.data.samplers import make_sampler
from offbench.data.spec import DatasetSpec
from offbench.errors import OffbenchError
from offbench.paths import builtin_dir
from offbench.testing import check_baseline
from offbench.training.config import resolve_config

T2MIR_TINY = {"moe": "t2mir", "num_experts": 3, "task_experts": 4, "top_k": 2, "expert_hidden": 8}
T2MIR_FIELDS = (
    "moe",
    "moe_layers",
    "num_experts",
    "task_experts",
    "top_k",
    "expert_hidden",
    "balance_weight",
    "contrastive_weight",
    "router_momentum",
    "task_pairs",
)
NO_DROPOUT = {"ad": {"attention_dropout": 0.0, "residual_dropout": 0.0, "embedding_dropout": 0.0}, "dpt": {"dropout": 0.0}}


def build(name: str, spec: DatasetSpec, seed: int = 0, **fields):
    torch.manual_seed(seed)
    cls = get_baseline(name)
    return cls(cls.Config(**{**cls.tiny_config, **NO_DROPOUT[name], **fields}), spec)


def model_inputs(name: str, batch: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """What the AD or DPT model's forward takes from a batch of its sampler."""
    if name == "ad":
        return [batch["observations"], batch["actions"], batch["rewards"]]
    keys = ("query_observations", "context_observations", "context_actions", "context_rewards", "context_next_observations")
    return [batch[key] for key in keys]


def scattered(experts: torch.Tensor, weights: torch.Tensor, num_experts: int) -> torch.Tensor:
    """(N, k) choices -> (N, E) weight of every expert for every token."""
    return torch.zeros(len(experts), num_experts).scatter(1, experts, weights)


def test_top_k_sends_each_token_to_exactly_k_experts_with_weights_summing_to_one():
    torch.manual_seed(0)
    logits = torch.randn(64, 6)
    experts, weights = top_k_gates(logits, 2)
    gates = scattered(experts, weights, 6)
    assert ((gates > 0).sum(1) == 2).all()
    torch.testing.assert_close(gates.sum(1), torch.ones(64))
    assert (gates > 0).eq(logits >= logits.topk(2, dim=1).values[:, 1:]).all()  # the two highest logits
    router = Router(16, 6, 3, noisy=True).train()
    assert router.noise is not None
    router.noise.data.normal_()  # a learned noise scale that matters
    routed = router(torch.randn(64, 16))
    gates = scattered(routed.experts, routed.weights, 6)
    assert ((gates > 0).sum(1) == 3).all()
    torch.testing.assert_close(gates.sum(1), torch.ones(64))


def test_load_balancing_term_is_zero_for_uniform_routing_and_grows_as_routing_collapses():
    tokens, experts = 60, 6
    uniform = load_balancing_loss(torch.full((experts,), tokens / experts), torch.full((experts,), tokens / experts))
    half = load_balancing_loss(torch.tensor([20.0, 20, 20, 0, 0, 0]), torch.tensor([20.0, 20, 20, 0, 0, 0]))
    collapsed = load_balancing_loss(torch.tensor([60.0, 0, 0, 0, 0, 0]), torch.tensor([60.0, 0, 0, 0, 0, 0]))
    assert uniform == 0
    assert 0 < half < collapsed
    # a spread, not a size: the same collapse over twice the tokens costs the same
    torch.testing.assert_close(collapsed, load_balancing_loss(torch.tensor([120.0, 0, 0, 0, 0, 0]), torch.tensor([120.0, 0, 0, 0, 0, 0])))
    # a router that sends every token to the same experts pays more than one that spreads them
    router = Router(8, experts, 1, noisy=False).eval()
    x = torch.randn(tokens, 8)
    with torch.no_grad():
        router.gate_in.zero_()
        router.gate_out.zero_()
    tied = router(x)  # every logit equal: every token to the same expert
    with torch.no_grad():
        router.gate_in.copy_(torch.eye(experts, 8) * 50)
        router.gate_out.copy_(torch.eye(experts))
    spread = router(torch.eye(8)[torch.arange(tokens) % experts])  # token i to expert i mod 6
    assert load_balancing_loss(spread.importance, spread.load) == 0
    assert load_balancing_loss(tied.importance, tied.load) > 1


def test_noisy_router_balance_term_has_a_gradient_through_its_load():
    torch.manual_seed(0)
    router = Router(8, 6, 2, noisy=True).train()
    routed = router(torch.randn(40, 8))
    (load_grad,) = torch.autograd.grad(routed.load.var(), router.gate_in)
    assert load_grad.abs().sum() > 0


def test_contrastive_task_loss_rewards_same_task_embeddings_and_takes_same_task_rows_as_positives():
    tasks = torch.tensor([0, 0, 1, 1, 2, 2])
    bilinear = torch.eye(3) * 5
    by_task = torch.eye(3)[tasks]  # each row's embedding points at its own task
    across = torch.eye(3)[torch.tensor([0, 1, 2, 0, 1, 2])]  # same-task rows point at different experts
    assert contrastive_task_loss(by_task, by_task, bilinear, tasks) < contrastive_task_loss(across, across, bilinear, tasks) - 1
    # the same embeddings, labelled so that rows 0 and 1 are no longer one task: their positives are now far
    assert (
        contrastive_task_loss(by_task, by_task, bilinear, tasks)
        < contrastive_task_loss(by_task, by_task, bilinear, torch.tensor([0, 1, 1, 2, 2, 0])) - 1
    )
    # a row with no other row of its task is left out; no positives at all gives 0
    three = torch.tensor([0, 0, 1])
    pair = contrastive_task_loss(by_task[:3], by_task[:3], bilinear, three)
    expected = -torch.log_softmax(torch.tensor([5.0, 0.0]), 0)[0]  # row 0: row 1 (same task) against row 2
    torch.testing.assert_close(pair, expected)
    trained = bilinear.clone().requires_grad_()
    alone = contrastive_task_loss(by_task, by_task, trained, torch.arange(6))
    assert alone == 0
    alone.backward()  # a zero gradient, not none: data-parallel ranks average it with the others'
    assert trained.grad is not None and torch.equal(trained.grad, torch.zeros(3, 3))


def test_a_batch_of_task_pairs_makes_each_rows_partner_its_one_positive():
    tasks = torch.tensor([5, 5, 8, 8])  # rows 0, 1 and rows 2, 3: two pairs, as task_pairs draws them
    queries = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    keys = queries.clone()
    keys[1] = torch.tensor([0.0, 1.0])  # row 1's key looks like the other pair's
    bilinear = 2 * torch.eye(2)  # a score q_i W k_j of 2 where q_i and k_j agree, else 0
    expected = [  # each row: -log softmax over the other rows' scores, its partner's listed first
        -torch.log_softmax(torch.tensor([0.0, 0.0, 0.0]), 0)[0],  # row 0: partner 1 (its key moved), rows 2, 3
        -torch.log_softmax(torch.tensor([2.0, 0.0, 0.0]), 0)[0],  # row 1: partner 0, rows 2, 3
        -torch.log_softmax(torch.tensor([2.0, 0.0, 2.0]), 0)[0],  # row 2: partner 3, row 0, row 1 (a negative scoring 2)
        -torch.log_softmax(torch.tensor([2.0, 0.0, 2.0]), 0)[0],  # row 3: partner 2, row 0, row 1
    ]
    torch.testing.assert_close(contrastive_task_loss(queries, keys, bilinear, tasks), torch.stack(expected).mean())


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_with_task_pairs_the_contrastive_positives_are_exactly_the_pairs(darkroom, name):
    """A task_pairs batch of darkroom-small (4 pairs of its 8 tasks: all different) through a T2MIR model: its
    contrastive loss is the loss whose positives are the pairs (row 2k with row 2k + 1) and nothing else."""
    spec = DatasetSpec.from_store(darkroom)
    baseline = build(name, spec, **T2MIR_TINY, task_pairs=True)
    assert baseline.sampler_options()["task_pairs"] is True
    batch = make_sampler(baseline.sampler, darkroom, 8, 0, **baseline.sampler_options()).sample()
    torch.manual_seed(3)
    losses = baseline.losses(batch)
    routing: list = []
    torch.manual_seed(3)  # the same router noise
    inputs = model_inputs(name, batch)
    baseline.model(*inputs, routing=routing)
    pairs = torch.arange(8) // 2
    (layer,) = routing
    torch.testing.assert_close(losses["contrastive_loss"], contrastive_task_loss(layer.task_query, layer.task_key, layer.bilinear, pairs))
    assert "task_pairs" not in build(name, spec, **T2MIR_TINY).sampler_options()  # off: the sampler is asked nothing new


def test_the_two_mixtures_each_write_half_of_the_output():
    torch.manual_seed(0)
    layer = T2MIRFeedForward(dim=8, token_experts=3, task_experts=4, top_k=2, expert_hidden=16, router_momentum=0.005).eval()
    h = torch.randn(2, 5, 8)
    out = layer(h)
    assert out.shape == (2, 5, 8)
    for silenced, kept, dims in ((layer.task_experts, slice(0, 4), slice(4, 8)), (layer.token_experts, slice(4, 8), slice(0, 4))):
        saved = {name: p.detach().clone() for name, p in silenced.named_parameters()}
        with torch.no_grad():
            silenced.down.zero_()
            silenced.down_bias.zero_()
        partial = layer(h)
        assert partial[..., dims].abs().max() == 0 and out[..., dims].abs().max() > 0
        torch.testing.assert_close(partial[..., kept], out[..., kept], rtol=0, atol=0)
        with torch.no_grad():
            for name, p in silenced.named_parameters():
                p.copy_(saved[name])


def one_expert_copy_of_dense(dense: Any, moe: Any) -> None:
    """`moe` (every block one expert per mixture, top-1, 4 x width hidden units) given `dense`'s weights: both
    experts take the MLP's first layer, the token expert the first half of its output rows, the task expert the rest."""
    missing, unexpected = moe.load_state_dict(dense.state_dict(), strict=False)
    assert all(".mlp." in key for key in unexpected) and all(".feed_forward." in key for key in missing)
    for dense_block, moe_block in zip(dense.transformer.blocks, moe.transformer.blocks):
        expand, _, contract, _ = dense_block.mlp
        half = contract.weight.shape[0] // 2
        layer = moe_block.feed_forward
        with torch.no_grad():
            for experts, rows in ((layer.token_experts, slice(0, half)), (layer.task_experts, slice(half, None))):
                experts.up[0].copy_(expand.weight)
                experts.up_bias[0].copy_(expand.bias)
                experts.down[0].copy_(contract.weight[rows])
                experts.down_bias[0].copy_(contract.bias[rows])


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_one_expert_per_mixture_recovers_the_dense_model(darkroom, name):
    spec = DatasetSpec.from_store(darkroom)
    dense = build(name, spec)
    width = dense.model.transformer.dim
    layers = len(dense.model.transformer.blocks)
    moe = build(name, spec, moe="t2mir", moe_layers=layers, num_experts=1, task_experts=1, top_k=1, expert_hidden=4 * width)
    one_expert_copy_of_dense(dense.model, moe.model)
    batch = make_sampler(dense.sampler, darkroom, 4, 0, **dense.sampler_options()).sample()
    inputs = model_inputs(name, batch)
    for model in (dense.model, moe.model):
        model.train()  # noisy routing included: one expert is chosen whatever the noise
    torch.testing.assert_close(moe.model(*inputs), dense.model(*inputs), rtol=1e-5, atol=1e-6)
    # and its routing terms are constant: nothing to balance, one expert's probability is 1 for every task
    losses = moe.losses(batch)
    assert losses["balance_loss"] == 0
    torch.testing.assert_close(losses["loss"], losses["action_loss"] + moe.config.contrastive_weight * losses["contrastive_loss"])


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_routing_terms_enter_the_objective_at_their_weights_and_the_log(darkroom, name):
    spec = DatasetSpec.from_store(darkroom)
    baseline = build(name, spec, **T2MIR_TINY, balance_weight=0.3, contrastive_weight=0.7)
    batch = make_sampler(baseline.sampler, darkroom, 16, 0, **baseline.sampler_options()).sample()
    assert "task_ids" in batch
    torch.manual_seed(1)
    losses = baseline.losses(batch)
    baseline.model.zero_grad()
    assert losses["balance_loss"] > 0 and losses["contrastive_loss"] > 0
    torch.testing.assert_close(losses["loss"], losses["action_loss"] + 0.3 * losses["balance_loss"] + 0.7 * losses["contrastive_loss"])
    layer = baseline.model.transformer.blocks[-1].feed_forward
    (
        bilinear,
        target,
    ) = layer.bilinear.detach().clone(), layer.target_gate_in.clone()
    torch.manual_seed(1)
    logged = baseline.update(batch)
    for term in ("action_loss", "balance_loss", "contrastive_loss"):  # logged unweighted, the action loss alone
        assert logged[term] == pytest.approx(losses[term].item(), rel=1e-6)
    assert not torch.equal(layer.bilinear, bilinear)  # the contrastive term trained the bilinear map
    # the momentum router moved router_momentum of the way to the stepped task router
    torch.testing.assert_close(layer.target_gate_in, target + 0.005 * (layer.task_router.gate_in.detach() - target))
    without = build(name, spec, **T2MIR_TINY, contrastive_weight=0.0)
    layer = without.model.transformer.blocks[-1].feed_forward
    bilinear = layer.bilinear.detach().clone()
    without.update(batch)
    assert torch.equal(layer.bilinear, bilinear)


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_t2mir_state_round_trips_and_evaluation_routes_tokens_alone(darkroom, name):
    spec = DatasetSpec.from_store(darkroom)
    baseline = build(name, spec, **T2MIR_TINY)
    sampler = make_sampler(baseline.sampler, darkroom, 16, 0, **baseline.sampler_options())
    baseline.update(sampler.sample())
    restored = build(name, spec, seed=1, **T2MIR_TINY)  # its own momentum router to start with
    restored.load_state_dict(baseline.state_dict())
    batch = sampler.sample()

    def losses(model):
        torch.manual_seed(2)  # the same router noise and dropout on both sides
        return {key: value.detach() for key, value in model.losses(batch).items()}

    original, loaded = losses(baseline), losses(restored)
    for key, value in original.items():
        assert torch.equal(loaded[key], value), key  # the momentum router's state is in the checkpoint
    # evaluation: no noise and no task id; the same tokens route the same way every time
    evaluation = {key: value for key, value in batch.items() if key != "task_ids"}
    inputs = model_inputs(name, evaluation)
    baseline.model.eval()
    with torch.no_grad():
        assert torch.equal(baseline.model(*inputs), baseline.model(*inputs))


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_t2mir_baselines_pass_the_baseline_contract(darkroom, name):
    check_baseline(get_baseline(name), {**get_baseline(name).tiny_config, **T2MIR_TINY}, darkroom)


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_t2mir_refuses_micro_batches_and_contrast_without_tasks(darkroom, name):
    cls = get_baseline(name)
    assert "moe = 't2mir'" in str(micro_batch_refusal(cls, cls.Config(moe="t2mir")))
    assert micro_batch_refusal(cls, cls.Config()) is None
    one_task = dataclasses.replace(DatasetSpec.from_store(darkroom), num_tasks=1)
    with pytest.raises(OffbenchError, match="contrastive_weight = 0"):
        build(name, one_task, **T2MIR_TINY)
    build(name, one_task, **T2MIR_TINY, contrastive_weight=0.0)


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_active_parameters_count_the_chosen_experts_only(darkroom, name):
    spec = DatasetSpec.from_store(darkroom)
    dense = build(name, spec)
    assert active_parameters(dense.model) == sum(p.numel() for p in dense.model.parameters())
    moe = build(name, spec, **T2MIR_TINY)
    layer = moe.model.transformer.blocks[-1].feed_forward
    per_expert = sum(p[0].numel() for p in layer.token_experts.parameters())
    unused = (3 - 2) * per_expert + (4 - 2) * per_expert + layer.token_router.noise.numel() + layer.bilinear.numel()
    assert active_parameters(moe.model) == sum(p.numel() for p in moe.model.parameters()) - unused


T2MIR_CPU_CONFIGS = {  # card: (the dense CPU config, its T2MIR twin), the same for AD and DPT
    "darkroom-small": ("cpu-darkroom.toml", "t2mir-darkroom-cpu.toml"),
    "bandit-small": ("bandit-thompson.toml", "t2mir-bandit-cpu.toml"),
}


@pytest.mark.parametrize("card", T2MIR_CPU_CONFIGS)
@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_t2mir_cpu_config_matches_the_dense_cpu_config_in_active_parameters(request, name, card):
    data = request.getfixturevalue(card.removesuffix("-small"))
    cls, spec = get_baseline(name), DatasetSpec.from_store(data)
    folder = builtin_dir("baselines") / name
    dense_file, moe_file = T2MIR_CPU_CONFIGS[card]
    dense_config = resolve_config(cls, card, folder / dense_file)
    moe_config = resolve_config(cls, card, folder / moe_file)
    assert moe_config.train == dense_config.train
    assert moe_config.baseline.task_pairs and not dense_config.baseline.task_pairs  # the reference's pair batches
    assert dataclasses.replace(moe_config.baseline, **{f: getattr(dense_config.baseline, f) for f in T2MIR_FIELDS}) == dense_config.baseline
    dense = active_parameters(cls(dense_config.baseline, spec).model)
    moe = active_parameters(cls(moe_config.baseline, spec).model)
    assert abs(moe - dense) / dense < 0.003
    source = (folder / moe_file).read_text()
    assert f"{moe:,} against the dense model's {dense:,}" in source


@pytest.mark.parametrize("name", ["ad", "dpt"])
def test_t2mir_fields_that_disagree_are_refused_in_one_line(darkroom, name):
    spec = DatasetSpec.from_store(darkroom)
    with pytest.raises(OffbenchError, match="top_k 5 is more than a mixture's experts"):
        build(name, spec, **{**T2MIR_TINY, "top_k": 5})
    with pytest.raises(OffbenchError, match="moe_layers 9 is more than the model's num_layers"):
        build(name, spec, **T2MIR_TINY, moe_layers=9)
    build(name, spec, top_k=5, moe_layers=9)  # the dense model has no mixtures to check


def test_an_interrupted_t2mir_run_in_task_pairs_resumes_to_the_same_numbers(darkroom, cli, tmp_path, monkeypatch):
    """The pairs are drawn from the sampler's own seeded stream, so Ctrl-C and --resume end where one run ends."""
    overrides = [f"{key}={value}" for key, value in {**T2MIR_TINY, "task_pairs": "true"}.items()]
    args = ["run", "baseline", "ad", "--dataset", "darkroom-small", "--config", TRAINING_CONFIGS / "ad-tiny.toml", "--out", tmp_path]
    args += [part for override in overrides for part in ("--set", override)]
    code, _, err = cli(*args, "--name", "whole")
    assert code == 0, err
    assert json.loads((tmp_path / "whole" / "run.json").read_text())["config"]["task_pairs"] is True
    assert all(line["contrastive_loss"] > 0 for line in logged_metrics(tmp_path / "whole"))
    assert_resume_repeats_the_run(cli, monkeypatch, "ad", args, tmp_path, stop_at=27)

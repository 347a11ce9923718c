"""The multi-task baselines' mechanisms on the tiny multi-task cards: MOORE's orthogonal mixture, PCGrad's
projection, HarmoDT's masks (sparsity, untouched weights, scheduled moves, never the embeddings or heads,
evaluation under the task's own mask), Prompt-DT's prompts, and that every one of them learns and acts."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
import torch
from helpers import TRAINING_CONFIGS as CONFIGS
from helpers import assert_resume_repeats_the_run, logged_metrics

from offbench.baselines import get_baseline
from offbench.baselines.base import DatasetSpec
from offbench.baselines.harmodt import change_count, erk_densities
from offbench.baselines.moore import MooreNetwork, gram_schmidt
from offbench.baselines.pcgrad import pcgrad_backward, per_task_losses, project_conflicting, task_losses
from offbench.data.samplers import make_sampler
from offbench.errors import OffbenchError
from offbench.training.config import resolve_config

TINY = ("metaworld/tiny-near-optimal", "minigrid/tiny-near-optimal")  # continuous, discrete
MULTI_TASK = ("moore-bc", "moore-iql", "prompt-dt", "harmodt")


@pytest.fixture
def tiny(multitask_home, monkeypatch):
    """dataset id -> (store, spec), from the shared home."""
    monkeypatch.setenv("OFFBENCH_HOME", str(multitask_home))
    import offbench

    def load(dataset: str):
        store = offbench.load(dataset)
        return store, DatasetSpec.from_store(store)

    return load


def build(name: str, dataset: str, tiny, **overrides):
    """The baseline with its tiny test config, and a sampler for it."""
    store, spec = tiny(dataset)
    cls = get_baseline(name)
    config = resolve_config(cls, dataset, CONFIGS / f"{name}-tiny.toml", [f"{k}={v}" for k, v in overrides.items()])
    torch.manual_seed(0)
    baseline = cls(config.baseline, spec)
    options = baseline.sampler_options() if hasattr(baseline, "sampler_options") else {}
    return baseline, make_sampler(baseline.sampler, store, config.train.batch_size, 0, **options)


# ---------------------------------------------------------------------------------------------- MOORE
def test_gram_schmidt_gives_an_orthonormal_set_for_every_sample():
    basis = gram_schmidt(torch.randn(32, 4, 16, dtype=torch.float64))
    gram = basis @ basis.transpose(1, 2)  # (B, k, k)
    assert torch.allclose(gram, torch.eye(4, dtype=torch.float64).expand(32, 4, 4), atol=1e-10)


def test_moore_mixes_orthogonalised_experts_with_bias_free_task_weights_and_one_head_per_task():
    torch.manual_seed(0)
    net = MooreNetwork(6, 2, [8, 8], num_experts=3, num_tasks=4, orthogonal=True)
    assert net.task_encoder.bias is None and len(net.heads) == 4
    x, tasks = torch.randn(10, 6), torch.tensor([0, 1, 2, 3, 0, 1, 2, 3, 0, 1])
    experts = gram_schmidt(net.experts(x).transpose(0, 1))
    expected = torch.tanh(torch.einsum("bk,bkd->bd", net.task_encoder(torch.eye(4)[tasks]), experts))
    assert torch.allclose(net.features(x, tasks), expected, atol=1e-6)
    before = net(x, tasks)
    with torch.no_grad():
        net.heads[2].weight.add_(1.0)  # task 2's head: only task 2's rows move
    moved = (net(x, tasks) - before).abs().sum(1) > 0
    assert moved.tolist() == (tasks == 2).tolist()

    plain = MooreNetwork(6, 2, [8, 8], num_experts=3, num_tasks=4, orthogonal=False)  # the ablation: no Gram-Schmidt
    raw = plain.experts(x).transpose(0, 1)
    assert torch.allclose(
        plain.features(x, tasks), torch.tanh(torch.einsum("bk,bkd->bd", plain.task_encoder(torch.eye(4)[tasks]), raw)), atol=1e-6
    )


# ---------------------------------------------------------------------------------------------- PCGrad
def test_pcgrad_projects_conflicting_gradients_and_leaves_agreeing_ones():
    conflicting = torch.tensor([[1.0, 1.0], [-1.0, 0.5]])
    projected = project_conflicting(conflicting)
    for t, other in ((0, 1), (1, 0)):
        assert abs(float(projected[t] @ conflicting[other])) < 1e-6  # on the normal plane of the other
    assert torch.allclose(projected[0], torch.tensor([1.0, 1.0]) - (-0.5 / 1.25) * torch.tensor([-1.0, 0.5]))
    agreeing = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.5, 2.0]])
    assert torch.equal(project_conflicting(agreeing), agreeing)


def test_pcgrad_backward_averages_shared_and_sums_task_specific_gradients():
    shared, head_a, head_b = (torch.nn.Parameter(torch.tensor(v)) for v in ([1.0, 2.0], [1.0], [1.0]))
    loss_a = (shared * torch.tensor([1.0, 0.0])).sum() * head_a.sum()  # grads: shared [1, 0], head_a [1]
    loss_b = (shared * torch.tensor([0.0, 3.0])).sum() * head_b.sum()  # shared [0, 3], head_b [6]: no conflict
    pcgrad_backward([loss_a, loss_b], [shared, head_a, head_b])
    assert torch.allclose(shared.grad, torch.tensor([0.5, 1.5])) and head_a.grad.item() == 1.0 and head_b.grad.item() == 6.0


def test_pcgrad_sums_on_task_heads_that_lie_in_every_task_graph():
    """MOORE's heads write into one output tensor, so every head is in every task's graph, with a zero gradient from
    the other tasks: a head is task-specific (its task's full gradient, summed) and the torso shared (mean)."""
    torch.manual_seed(0)
    net = MooreNetwork(6, 2, [8, 8], num_experts=2, num_tasks=2, orthogonal=True)
    x, tasks, targets = torch.randn(12, 6), torch.tensor([0, 1] * 6), torch.randn(12, 2)
    losses = per_task_losses((net(x, tasks) - targets).pow(2).mean(1), tasks)
    params = list(net.parameters())
    raw = [torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True) for loss in losses]
    flat = torch.stack([torch.cat([g.reshape(-1) for g in grads]) for grads in raw])
    torch.manual_seed(1)
    projected = project_conflicting(flat).sum(0)
    torch.manual_seed(1)
    pcgrad_backward(losses, params)
    heads = {id(p) for p in net.heads.parameters()}
    offset = 0
    for p in params:
        total = projected[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
        assert torch.allclose(p.grad, total if id(p) in heads else total / 2, atol=1e-7)


# ---------------------------------------------------------------------------------------------- HarmoDT
def test_erk_densities_keep_the_overall_density_and_the_schedule_is_a_cosine_bump():
    shapes = {"w1": (64, 16), "b1": (64,), "w3": (200, 200), "w4": (100, 400)}
    densities = erk_densities(shapes, 0.8)
    sizes = {name: np.prod(shape) for name, shape in shapes.items()}
    assert sum(densities[n] * sizes[n] for n in shapes) / sum(sizes.values()) == pytest.approx(0.8)
    assert densities["b1"] == densities["w1"] == 1.0 and densities["w3"] < densities["w4"] < 1.0  # ERK: thin layers denser
    assert [change_count(i, 1000, 0, 100) for i in (0, 250, 500, 750, 999)] == [0, 50, 100, 50, 0]


def test_harmodt_masks_only_the_transformer_and_keeps_its_sparsity(tiny):
    harmo, sampler = build("harmodt", "metaworld/tiny-near-optimal", tiny)
    names = [name for name, _ in harmo.masked]
    assert names and all(n.startswith(("blocks.", "output_norm.")) for n in names)
    assert not any("embed" in n or "head" in n for n in names)
    active = harmo.masks.sum(1)
    assert torch.allclose(active.float() / harmo.masks.shape[1], torch.tensor(0.8), atol=1e-3)
    for _ in range(20):  # 2 outer steps
        harmo.update(sampler.sample())
        assert torch.equal(harmo.masks.sum(1), active)


def test_harmodt_inner_step_leaves_weights_outside_the_task_mask_untouched(tiny):
    harmo, sampler = build("harmodt", "metaworld/tiny-near-optimal", tiny)
    batch = sampler.sample()
    task = int(batch["task_ids"][0])
    before = [p.detach().clone() for _, p in harmo.masked]
    shared_before = harmo.model.embed.state.weight.detach().clone()
    harmo.update(batch)
    outside_same = inside_moved = 0
    for (_, p), old, mask in zip(harmo.masked, before, harmo.mask_views(task)):
        assert torch.equal(p.detach()[~mask], old[~mask])
        inside_moved += int((p.detach()[mask] != old[mask]).sum())
        outside_same += int((~mask).sum())
    assert outside_same > 0 and inside_moved > 0
    assert not torch.equal(harmo.model.embed.state.weight, shared_before)  # embeddings: shared, trained, unmasked


def test_harmodt_grad_clip_zero_turns_clipping_off(tiny):
    """grad_clip = 0 means no clipping, as in DT and Prompt-DT: the same step as a clip that never binds (a clip to
    norm 0 would zero every gradient and leave the weights to weight decay alone)."""
    batch = None
    gradients, weights = {}, {}
    for clip in (0.0, 1e9):
        harmo, sampler = build("harmodt", "metaworld/tiny-near-optimal", tiny, grad_clip=clip)
        batch = sampler.sample() if batch is None else batch
        harmo.update(batch)
        gradients[clip] = torch.cat([p.grad.reshape(-1) for p in harmo.model.parameters() if p.grad is not None])
        weights[clip] = torch.cat([p.detach().reshape(-1) for p in harmo.model.parameters()])
    assert gradients[0.0].abs().sum() > 0
    assert torch.equal(gradients[0.0], gradients[1e9]) and torch.equal(weights[0.0], weights[1e9])


def test_harmodt_outer_step_moves_exactly_the_scheduled_number_of_weights(tiny):
    harmo, sampler = build("harmodt", "metaworld/tiny-near-optimal", tiny)
    for _ in range(9):
        harmo.update(sampler.sample())
    before = harmo.masks.clone()
    harmo.update(sampler.sample())  # iteration 10: the first outer step
    k = change_count(9, 40, 0, 20)
    assert k > 0
    for task in range(harmo.spec.num_tasks):
        assert int((harmo.masks[task] & ~before[task]).sum()) == k  # regrown
        assert int((before[task] & ~harmo.masks[task]).sum()) == k  # pruned


@pytest.mark.parametrize("rows_tasks", [[0, 1, 0, 1], [1, 0, 1, 1], [1, 1, 1, 1]])
def test_harmodt_evaluates_each_task_under_its_own_mask(tiny, rows_tasks):
    """All rows in one pass, each group of a task's rows under that task's masked weights: groups of equal size,
    of unequal size (the smaller one padded), and a single task present (a subset of the stacked weights)."""
    harmo, sampler = build("harmodt", "metaworld/tiny-near-optimal", tiny)
    for _ in range(3):
        harmo.update(sampler.sample())
    batch = {k: v[:4] for k, v in sampler.sample().items() if not k.startswith(("prompt_", "task_prompt_"))}
    task_ids = torch.tensor(rows_tasks)
    together = harmo.act_rows(batch, task_ids)
    for task in sorted(set(rows_tasks)):
        originals = harmo.apply_mask(task)
        alone = harmo.predict(batch, {k: v[task_ids] for k, v in harmo.task_prompts.items()})[:, -1]
        harmo.restore(originals)
        rows = task_ids == task
        assert torch.allclose(together[rows], alone[rows], atol=1e-6)
    harmo.masks[1] = harmo.masks[0]  # the same mask for both tasks: task 1's rows change
    assert not torch.allclose(harmo.act_rows(batch, task_ids)[task_ids == 1], together[task_ids == 1])


# ---------------------------------------------------------------------------------------------- prompts
def test_prompts_come_from_the_rows_task_and_evaluation_uses_its_best_episode(tiny):
    store, _ = tiny("metaworld/tiny-near-optimal")
    sampler = make_sampler("prompt_segments", store, 16, 0, segment_length=4, prompt_length=3, prompt_pool=2)
    batch = sampler.sample()
    returns = store.episode_returns()
    episode_task = np.asarray(store.columns["task_id"])[store.episode_starts[:-1]]
    for task in range(2):
        best = int(np.flatnonzero(episode_task == task)[np.argmax(returns[episode_task == task])])
        end = store.episode_starts[best + 1]
        expected = np.asarray(store.observations[end - 4 : end - 1])  # the 3 steps before the last
        rows = (batch["task_ids"] == task).numpy()
        assert rows.any() and np.allclose(batch["task_prompt_observations"][rows].numpy(), expected)
    assert all(batch["prompt_observations"][row].abs().sum() > 0 for row in range(16))  # every row has a prompt
    round_robin = make_sampler("prompt_segments", store, 8, 0, segment_length=4, one_task_per_batch=True)
    assert [set(round_robin.sample()["task_ids"].tolist()) for _ in range(4)] == [{0}, {1}, {0}, {1}]


@pytest.mark.parametrize("dataset", TINY)
def test_prompt_dt_acts_from_the_prompt_states_as_from_the_whole_sequence(tiny, dataset):
    """Evaluation runs each task's prompt through the blocks once and the segments against its keys and values:
    the predictions equal the whole prompt + segment sequence's, for every s_t token and for the newest only,
    with left padding in a segment and a task whose prompt is partly padding; two blocks, so the prompt's states
    of the second come from its tokens through the first."""
    prompt_dt, sampler = build("prompt-dt", dataset, tiny, num_layers=2)
    for _ in range(3):
        prompt_dt.update(sampler.sample())
    prompt_dt.model.eval()
    prompt_dt.task_prompts["mask"][1, :2] = False
    batch = {k: v[:4] for k, v in sampler.sample().items() if not k.startswith(("prompt_", "task_prompt_"))}
    batch["mask"][0, :2] = False
    task_ids = torch.tensor([0, 1, 1, 0])
    prompts = {k: v[task_ids] for k, v in prompt_dt.task_prompts.items()}
    states = [(k[task_ids], v[task_ids]) for k, v in prompt_dt.task_prompt_states()]
    with torch.no_grad():
        for newest_only in (False, True):
            whole = prompt_dt.predict(batch, prompts, newest_only=newest_only)
            from_states = prompt_dt.predict(batch, prompts, newest_only=newest_only, prompt_states=states)
            torch.testing.assert_close(from_states, whole)
    torch.testing.assert_close(prompt_dt.act_rows(batch, task_ids), whole[:, -1])


@pytest.mark.parametrize("name", ["dt", "prompt-dt", "harmodt"])
@pytest.mark.parametrize("dataset", TINY)
def test_return_conditioned_baselines_see_the_returns_at_a_scale_that_matters(tiny, name, dataset):
    """The standard config's reward_scale keeps the dataset's best return-to-go between 0.1 and 100 once scaled:
    D4RL's 1/1000 on MiniGrid's returns in [0, 1] would leave the network a conditioning input of at most 0.001."""
    store, _ = tiny(dataset)
    config = resolve_config(get_baseline(name), dataset, None, [])
    scaled = float(store.episode_returns().max()) * config.baseline.reward_scale
    assert 0.1 <= scaled <= 100, f"{name} on {dataset}: best return-to-go enters the network as {scaled:g}"


# ---------------------------------------------------------------------------------------------- all of them
@pytest.mark.parametrize("dataset", TINY)
@pytest.mark.parametrize("name", MULTI_TASK)
def test_multitask_baselines_learn_and_act_per_task(tiny, name, dataset):
    baseline, sampler = build(name, dataset, tiny)
    first = [baseline.update(sampler.sample()) for _ in range(5)]
    for _ in range(30):
        last = baseline.update(sampler.sample())
    key = "action_loss" if "action_loss" in last else "actor_loss"
    assert np.isfinite(last[key]) and last[key] < np.mean([f[key] for f in first])
    policy = baseline.policy(types.SimpleNamespace(task_ids=np.array([0, 1, 1]), target_return=1.0, deterministic=True))
    policy.reset(3)
    store, spec = tiny(dataset)
    actions = policy.act(np.asarray(store.observations[:3]))
    policy.observe(np.zeros(3), np.zeros(3, dtype=bool))
    assert actions.shape == ((3,) if spec.discrete else (3, spec.action_dim))
    if not spec.discrete:
        assert np.all(np.abs(actions) <= 1.0)


@pytest.mark.parametrize("name", ["bc", "dt", "moore-bc", "prompt-dt"])
def test_pcgrad_option_steps_with_the_projected_task_gradients(name):
    """`gradient=pcgrad`: one update equals an optimiser step on pcgrad_backward of the batch's task losses."""
    from baseline_contract import multi_task_store

    store = multi_task_store()
    spec, cls = DatasetSpec.from_store(store), get_baseline(name)
    config = cls.Config(**{**cls.tiny_config, "gradient": "pcgrad"})
    if hasattr(config, "embedding_dropout"):  # no dropout: the two computations draw different masks
        config.embedding_dropout = config.attention_dropout = config.residual_dropout = 0.0
    models = []
    for _ in range(2):
        torch.manual_seed(0)
        models.append(cls(config, spec))
    options = models[0].sampler_options() if hasattr(models[0], "sampler_options") else {}
    batch = make_sampler(cls.sampler, store, 24, 0, **options).sample()
    torch.manual_seed(1)  # PCGrad's random task order
    models[0].update(batch)
    manual = models[1]
    net, optimizer = (manual.actor, manual.optimizer) if hasattr(manual, "actor") else (manual.model, manual.optimizer)
    net.train()
    torch.manual_seed(1)
    if name == "prompt-dt":
        manual.keep_task_prompts(batch)
        losses = per_task_losses(manual.row_losses(batch), batch["task_ids"])
    else:
        losses = task_losses(manual.loss, batch)
    optimizer.zero_grad()
    pcgrad_backward(losses, net.parameters())
    if getattr(config, "grad_clip", 0) > 0:
        torch.nn.utils.clip_grad_norm_(net.parameters(), config.grad_clip)
    optimizer.step()
    for a, b in zip((models[0].actor if hasattr(models[0], "actor") else models[0].model).parameters(), net.parameters()):
        assert torch.allclose(a, b, atol=1e-6)


def test_multitask_baselines_refuse_a_single_task_spec(tiny):
    _, spec = tiny("minigrid/tiny-near-optimal")
    single = DatasetSpec(spec.observation_space, spec.action_space, spec.observation_shape, spec.action_dim, spec.discrete, 10)
    for name in MULTI_TASK:
        cls = get_baseline(name)
        with pytest.raises(OffbenchError, match="multi-task"):
            cls(cls.Config(), single)
    with pytest.raises(OffbenchError, match="gradient"):
        get_baseline("harmodt")(get_baseline("harmodt").Config(gradient="pcgrad"), spec)
    for name in ("bc", "dt"):  # gradient surgery needs tasks
        with pytest.raises(OffbenchError, match="one task"):
            get_baseline(name)(get_baseline(name).Config(gradient="pcgrad"), single)


# ---------------------------------------------------------------------------------------------- runs
@pytest.mark.parametrize("name, stop_at", [("harmodt", 27), ("moore-bc", 33)])
def test_multitask_runs_repeat_and_resume_to_the_same_numbers(multitask_home, monkeypatch, cli, tmp_path, name, stop_at):
    """Same seed, same numbers; Ctrl-C after the step-20 checkpoint and --resume end like the whole run (HarmoDT:
    masks, iteration count and each task's latest batch restored; MOORE-BC with PCGrad: its random task order)."""
    monkeypatch.setenv("OFFBENCH_HOME", str(multitask_home))
    args = [
        "run",
        "baseline",
        name,
        "--dataset",
        "metaworld/tiny-near-optimal",
        "--config",
        CONFIGS / f"{name}-tiny.toml",
        "--out",
        tmp_path,
    ]
    if name == "moore-bc":
        args += ["--set", 'gradient="pcgrad"']
    for run in ("whole", "again"):
        code, _, err = cli(*args, "--name", run)
        assert code == 0, err
    assert logged_metrics(tmp_path / "whole") == logged_metrics(tmp_path / "again")
    assert_resume_repeats_the_run(cli, monkeypatch, name, args, tmp_path, stop_at=stop_at)


@pytest.mark.parametrize("name", MULTI_TASK)
def test_a_multitask_baseline_on_a_single_task_card_is_one_line_and_writes_nothing(pendulum, cli, tmp_path, name):
    code, _, err = cli("run", "baseline", name, "--dataset", "pendulum-scripted", "--out", tmp_path / "runs")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "single-task" in err and name in err
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------------------------------------- sampled BC
@pytest.mark.parametrize("name", ["bc", "moore-bc"])
def test_bc_samples_discrete_actions_from_its_softmax_with_the_runs_seed(tiny, name):
    """A sampling behaviour policy's greedy version can loop where its draws did not, so BC can act by drawing from
    the distribution its cross-entropy fits: frequencies follow the softmax, the run's seed repeats them."""
    from offbench.evaluation.policy import PolicyOptions

    baseline, _ = build(name, "minigrid/tiny-near-optimal", tiny)
    logits = torch.log(torch.tensor([0.1, 0.6, 0.3] + [1e-9] * (baseline.spec.action_space.n - 3)))
    baseline.actor.forward = lambda observations, task_ids=None: logits.expand(len(observations), -1)
    observations = np.zeros((4000, *baseline.spec.observation_shape), dtype=np.float32)
    options = PolicyOptions(task_ids=np.zeros(4000, dtype=np.int64), deterministic=False)

    def draws(seed: int) -> np.ndarray:
        baseline.evaluation_seed = seed
        policy = baseline.policy(options)
        policy.reset(4000)
        return policy.act(observations)

    first = draws(0)
    assert np.allclose(np.bincount(first, minlength=3)[:3] / 4000, [0.1, 0.6, 0.3], atol=0.03)
    assert np.array_equal(first, draws(0)) and not np.array_equal(first, draws(1))
    greedy = baseline.policy(PolicyOptions(task_ids=options.task_ids))
    greedy.reset(4000)
    assert set(greedy.act(observations)) == {1}


def test_bc_refuses_to_sample_continuous_actions_in_one_line(tiny):
    from offbench.evaluation.policy import PolicyOptions

    baseline, _ = build("bc", "metaworld/tiny-near-optimal", tiny)
    with pytest.raises(OffbenchError, match=r"^bc samples discrete actions only: its continuous head regresses the action"):
        baseline.policy(PolicyOptions(deterministic=False))


@pytest.mark.parametrize("name", ["dt", "prompt-dt", "harmodt"])
def test_the_dt_family_samples_discrete_actions_from_its_softmax_with_the_runs_seed(tiny, name):
    from offbench.evaluation.policy import PolicyOptions

    baseline, _ = build(name, "minigrid/tiny-near-optimal", tiny)
    rows = 3000
    logits = torch.log(torch.tensor([0.1, 0.6, 0.3] + [1e-9] * (baseline.spec.action_space.n - 3)))
    observations = np.zeros((rows, *baseline.spec.observation_shape), dtype=np.float32)

    def actions(seed: int, deterministic: bool) -> np.ndarray:
        baseline.evaluation_seed = seed
        options = PolicyOptions(task_ids=np.zeros(rows, dtype=np.int64), target_return=1.0, deterministic=deterministic)
        policy = baseline.policy(options)
        policy.reset(rows)
        policy.predict = lambda: logits.expand(rows, -1)
        return policy.act(observations)

    first = actions(0, deterministic=False)
    assert np.allclose(np.bincount(first, minlength=3)[:3] / rows, [0.1, 0.6, 0.3], atol=0.03)
    assert np.array_equal(first, actions(0, deterministic=False)) and not np.array_equal(first, actions(1, deterministic=False))
    assert set(actions(0, deterministic=True)) == {1}


@pytest.mark.parametrize("name", ["dt", "prompt-dt"])
def test_the_dt_family_refuses_to_sample_continuous_actions_in_one_line(tiny, name):
    from offbench.evaluation.policy import PolicyOptions

    baseline, _ = build(name, "metaworld/tiny-near-optimal", tiny)
    options = PolicyOptions(task_ids=np.zeros(2, dtype=np.int64), target_return=1.0, deterministic=False)
    with pytest.raises(OffbenchError, match=rf"^{name} samples discrete actions only: its continuous head regresses the action"):
        baseline.policy(options)


@pytest.mark.parametrize("name", ["dt", "prompt-dt"])
def test_a_sampled_multitask_run_and_its_sampled_re_evaluation_repeat_its_numbers(multitask_home, monkeypatch, cli, tmp_path, name):
    """The action-mode probe before a run builds the policy with what it needs (a task's target, task ids): a
    return-conditioned run on a discrete multi-task card samples, and `evaluate --actions sampled` replays it."""
    monkeypatch.setenv("OFFBENCH_HOME", str(multitask_home))
    args = ["run", "baseline", name, "--dataset", "minigrid/tiny-near-optimal", "--config", CONFIGS / f"{name}-tiny.toml"]
    code, _, err = cli(*args, "--set", "eval_deterministic=false", "--out", tmp_path, "--name", "sampled")
    assert code == 0, err
    code, out, err = cli("evaluate", tmp_path / "sampled")
    assert code == 0, err
    recorded = json.loads((tmp_path / "sampled" / "evaluations.jsonl").read_text().splitlines()[-1])["success_rate"]
    assert f"{recorded:.2f}" in next(line for line in out.splitlines() if line.split()[:1] == ["all"])  # same draws

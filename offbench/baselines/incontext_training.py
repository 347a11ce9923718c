"""The Config fields that turn on and size T2MIR's mixtures of experts (docs/in-context-rl.md), one declaration for
AD and DPT. The defaults are the reference's Dark Room AD; DPTConfig redeclares the four its Dark Room DPT sets
otherwise. A dataclass base puts these fields before the Config's own in `dataclasses.fields` (and so in a
printed config); what a config reads and means is unchanged."""

from __future__ import annotations

from dataclasses import dataclass

from offbench.records import ranged


@dataclass
class T2MIRFields:
    moe: str = ranged(
        "none", choices=("none", "t2mir")
    )  # "t2mir": T2MIR's token- and task-wise experts in the last blocks (docs/in-context-rl.md)
    moe_layers: int = ranged(1, ge=1)  # T2MIR: how many of the last blocks get experts (the reference: the last one)
    num_experts: int = ranged(6, ge=1)  # T2MIR: token-wise experts
    task_experts: int = ranged(12, ge=1)  # T2MIR: task-wise experts (the reference's Dark Room AD: 12)
    top_k: int = ranged(2, ge=1)  # T2MIR: experts per token in each mixture
    expert_hidden: int = ranged(1024, ge=1)  # T2MIR: hidden units of one expert (the reference: twice the width)
    balance_weight: float = ranged(0.1, ge=0)  # T2MIR: weight of the token router's load-balancing term
    contrastive_weight: float = ranged(0.01, ge=0)  # T2MIR: weight of the task router's contrastive loss
    router_momentum: float = ranged(0.005, gt=0, le=1)  # T2MIR: EMA rate of the task router's momentum copy (keys)

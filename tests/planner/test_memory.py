"""Memory by parallelism: the GB a GPU needs depends on the strategy and the GPU count."""

from __future__ import annotations

import math

import pytest

from planner.errors import JobSpecError
from planner.job import parse_job
from planner.memory import OVERHEAD_GB, MemoryRule
from planner.quote import make_quote
from pricing.catalog import Catalog, Offering


def offering(name: str, gpu: str, mem: float, gpn: int, price: float, cloud: str = "aws") -> Offering:
    return Offering(cloud, "us-east-1", None, name, gpu, gpn, mem, 12.0 * gpn, 100.0 * gpn, price)


H100_NODE = offering("p5.48xlarge", "H100", 80, 8, 55.0)
T4_NODE = offering("g4dn.12xlarge", "T4", 16, 4, 3.9)


def job(**workload) -> dict:
    speeds = workload.pop("throughput", {"H100": 400.0, "T4": 40.0})
    return {"name": "memory", "workload": {"model": "llm", "tokens": 1e8, **workload, "throughput": speeds,
                                           "scaling": {"efficiency_per_doubling": 0.95}},
            "constraints": {"max_nodes": 16}, "purchase": {"allow": ["on_demand"]}, "objective": {"tolerance": 0}}


def quote(raw: dict, *offerings: Offering):
    sold = {o.gpu for o in offerings}  # speeds only for the GPUs this catalog sells
    speeds = raw["workload"]["throughput"]
    raw["workload"]["throughput"] = {g: v for g, v in speeds.items() if g in sold}
    q = make_quote(parse_job(raw), Catalog.of(list(offerings), origin="test"), top=0, frontier_points=0)
    raw["workload"]["throughput"] = speeds
    return q


def test_model_states_match_the_zero_paper():
    """ZeRO (SC'20) Figure 1: 7.5B parameters on 64 GPUs hold 120 GB (DDP), 16.6 GB (ZeRO-2, P_os+g)
    and 1.9 GB (ZeRO-3, P_os+g+p) of model states per GPU with mixed-precision Adam."""
    assert MemoryRule(7.5, strategy="ddp").states_gb(64) == pytest.approx(120.0)
    assert MemoryRule(7.5, strategy="zero2").states_gb(64) == pytest.approx(16.64, abs=0.01)
    assert MemoryRule(7.5, strategy="fsdp").states_gb(64) == pytest.approx(1.875)
    # tensor parallelism splits the states first, then data parallelism shards them
    assert MemoryRule(7.5, strategy="ddp", tensor_parallel=8).states_gb(64) == pytest.approx(15.0)


def test_activation_rule_follows_the_gpt_shape():
    layers, width = MemoryRule(7.0).shape()
    assert layers == pytest.approx(32.9, abs=0.1) and width == pytest.approx(4212, abs=5)  # a 7B GPT: 32 x 4096
    act = MemoryRule(7.0, micro_batch_tokens=4096).activations_gb()
    assert act == pytest.approx((2 * 4096 * width * layers + 34 * 4096 * width) / 1e9)
    assert MemoryRule(7.0, activation_gb=3.0).activations_gb() == 3.0


def test_70b_fsdp_is_feasible_exactly_from_the_gpu_count_the_rule_gives():
    # The rule by hand: 16 bytes x 70e9 / G of states + 6 GB activations + the overhead <= 80 GB.
    per_gpu_fixed = 6.0 + OVERHEAD_GB
    least = math.ceil(16 * 70 / (80 - per_gpu_fixed))
    assert least == 16  # two 8-GPU nodes
    raw = job(params_billions=70, strategy="fsdp", activation_gb=6.0)
    q = quote(raw, H100_NODE)
    assert q.plan is not None
    assert all(c.gpus >= least for c in q.candidates.configs)
    assert min(c.gpus for c in q.candidates.configs) == least
    assert q.plan.solution.phases[0].config.gpus == least  # fewest GPUs: the best scaling efficiency
    raw["constraints"]["max_nodes"] = least // 8 - 1
    short = quote(raw, H100_NODE)
    assert short.plan is None
    assert "constraints.max_nodes" in short.infeasible.binding
    assert [r.value for r in short.infeasible.relaxations] == [least // 8]
    assert "16 GPUs of 80 GB" in short.infeasible.reasons[0]


def test_7b_ddp_is_not_put_on_16_gb_cards_but_fsdp_may_be_sharded_there():
    ddp = quote(job(params_billions=7, strategy="ddp", activation_gb=2.0), T4_NODE, H100_NODE)
    assert ddp.plan is None  # 112 GB of states on every GPU fits nowhere
    assert ddp.infeasible.binding == ["workload.strategy"]
    fsdp = quote(job(params_billions=7, strategy="fsdp", activation_gb=2.0, throughput={"T4": 40.0}), T4_NODE)
    assert fsdp.plan is not None
    # 112 / G + 2 + 2 <= 16  ->  G >= 10, i.e. three 4-GPU nodes
    assert min(c.gpus for c in fsdp.candidates.configs) == 12
    assert fsdp.plan.solution.phases[0].config.gpus >= 12


def test_tensor_parallel_stays_within_a_node():
    raw = job(params_billions=70, strategy="ddp", tensor_parallel=8, activation_gb=1.0, throughput={"T4": 40.0,
                                                                                                    "H100": 400.0})
    q = quote(raw, T4_NODE, H100_NODE)
    # TP 8 does not divide a 4-GPU node; on 8 H100s: 16 x 70 / 8 = 140 GB > 80, so nothing fits
    assert q.plan is None
    raw["workload"]["strategy"] = "zero2"  # 2 x 70/8 + 14 x 70/8/N + 1 + 2 <= 80 from N = 3 data-parallel ranks
    assert math.ceil(14 * 70 / 8 / (80 - 2 * 70 / 8 - 1 - OVERHEAD_GB)) == 3
    q = quote(raw, T4_NODE, H100_NODE)
    assert q.plan is not None
    assert {c.pool.gpu for c in q.candidates.configs} == {"H100"}
    assert min(c.gpus for c in q.candidates.configs) == 3 * 8


def test_min_gpu_memory_gb_overrides_the_rule():
    raw = job(params_billions=70, strategy="fsdp", min_gpu_memory_gb=16)
    q = quote(raw, T4_NODE)
    assert q.plan is not None and q.plan.solution.phases[0].config.nodes == 1  # 16 GB per GPU, any count
    assert any("overrides the memory rule" in w for w in q.candidates.warnings)


def test_memory_keys_need_params_billions():
    with pytest.raises(JobSpecError) as err:
        parse_job(job(strategy="fsdp"))
    assert "strategy describe the memory rule and need params_billions" in str(err.value)
    with pytest.raises(JobSpecError) as err:
        parse_job(job(params_billions=7, strategy="zero1"))
    assert "workload.strategy" in str(err.value)

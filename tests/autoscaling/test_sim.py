"""The benchmark's simulator on a small trace: the queue-wait policy reacts where CPU cannot."""

import importlib.util
import sys
from pathlib import Path

spec = importlib.util.spec_from_file_location(
    "autoscaling_sim", Path(__file__).parents[2] / "bench" / "autoscaling_sim.py")
sim = importlib.util.module_from_spec(spec)
sys.modules["autoscaling_sim"] = sim  # dataclasses resolve their module by name
spec.loader.exec_module(sim)


def test_queue_wait_policy_beats_cpu_on_a_small_surge():
    sc = sim.Scenario(base_rate=4.0, warmup_s=300, steady_s=120, surge_s=240, after_s=120,
                      ramp_s=60, max_replicas=10)
    cpu = sim.simulate(sc, "cpu")
    qw = sim.simulate(sc, "queue-wait")
    assert max(d for _, d, _ in cpu.replicas) == min(d for _, d, _ in cpu.replicas)  # CPU is blind
    assert max(d for _, d, _ in qw.replicas) > 2
    assert qw.share_under(sc.target_s, sc.in_surge) > cpu.share_under(sc.target_s, sc.in_surge) + 0.3

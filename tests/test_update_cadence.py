"""The update-ratio cadence shared by the Trainer and watch()."""
import math

from gradviz.core.stats.update_cadence import REPLAN_EVERY, UPDATE_BUDGET, WARMUP_STEPS, UpdateCadence


def _feed(c: UpdateCadence, step_s: float, update_s: float, steps: int) -> list[int]:
    measured = []
    for s in range(steps):
        if c.due(s):
            measured.append(s)
            c.update_took(update_s)
        c.step_took(step_s)
    return measured


def test_cheap_updates_are_measured_every_step():
    c = UpdateCadence()
    assert _feed(c, step_s=1e-2, update_s=1e-6, steps=200) == list(range(200))


def test_costly_updates_are_thinned_to_the_budget():
    c = UpdateCadence()
    step_s, update_s = 1e-3, 0.9e-5                   # 1.5x counted: 1.35 % of a step -> every 3 steps at 0.5 %
    measured = _feed(c, step_s, update_s, steps=WARMUP_STEPS + 3 * REPLAN_EVERY)
    assert measured[:WARMUP_STEPS] == list(range(WARMUP_STEPS))     # warm-up: every step
    assert c.auto_every == math.ceil(1.5 * update_s / (UPDATE_BUDGET * step_s)) == 3
    late = [s for s in measured if s >= WARMUP_STEPS + REPLAN_EVERY]
    assert all(s % 3 == 0 for s in late) and len(late) >= REPLAN_EVERY // 3


def test_forced_cadence():
    assert _feed(UpdateCadence(4), 1e-3, 1.0, 20) == [0, 4, 8, 12, 16]
    assert _feed(UpdateCadence(0), 1e-3, 0.0, 20) == []


def test_a_pause_between_steps_does_not_densify_the_cadence():
    c = UpdateCadence()
    step_s, update_s = 1e-3, 1.8e-5
    measured = []
    for s in range(WARMUP_STEPS + 3 * REPLAN_EVERY):
        if c.due(s):
            measured.append(s)
            c.update_took(update_s)
        c.step_took(5.0 if s % 20 == 19 else step_s)      # an evaluation pause every 20 steps
    assert c.auto_every >= 3


def test_the_first_costly_measurement_is_forgotten():
    c = UpdateCadence()
    c.update_took(1.0)                                 # the first snapshot allocates
    c.update_took(1e-5)
    assert math.isclose(c.update_cost, 1.5e-5)


def test_a_replanned_interval_is_agreed_on():
    """Ranks with sharded parameters reduce their statistics together: each re-plan goes
    through ``agree`` (the watch passes the largest over the ranks)."""
    asked = []
    c = UpdateCadence(agree=lambda planned: asked.append(planned) or 7)
    c.update_took(0.01)
    for s in range(61):
        c.step_took(0.001)
        c.due(s)
    assert len(asked) == 2 and c.auto_every == 7

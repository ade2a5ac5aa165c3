"""A check of your own: a latency budget per test, from a ``budget`` marker."""

from pytest_aoti import AotiCheckError, Outcome


class LatencyBudget:
    name, phase = "latency", "engine"

    def applies(self, plan, context):
        return context.item is not None and context.item.get_closest_marker("budget") is not None

    def run(self, plan, context):
        budget = context.item.get_closest_marker("budget").args[0]
        seconds = context.figures["engine_seconds"]  # timing ran before: same phase, built-in
        if seconds > budget:
            raise AotiCheckError(f"engine call took {seconds:.6f} s, over the budget of {budget} s")
        return Outcome(figures={"budget": budget, "engine_calls_timed": True})


def pytest_configure(config):
    config.addinivalue_line("markers", "budget(seconds): an engine call's latency budget")


def pytest_aoti_checks(config):
    return [LatencyBudget()]

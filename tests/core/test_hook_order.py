"""The plugin's own hooks answer in the default plugins' order whatever the order they were
registered in, then the other plugins' and conftests' in registration order; no torch."""

from __future__ import annotations

import pluggy

from pytest_aoti.hook_order import answers_in_order

hookspec = pluggy.HookspecMarker("demo")
hookimpl = pluggy.HookimplMarker("demo")


class Spec:
    @hookspec
    def demo_hook(self, seen: list[str]) -> str | None:  # type: ignore[empty-body]
        """Say who answers."""


def answering(name: str, **marks: bool) -> object:
    class Plugin:
        @hookimpl(**marks)
        def demo_hook(self, seen: list[str]) -> str:
            seen.append(name)  # the call's side effect: a section written, say
            return name

    return Plugin()


def manager_of(*plugins: tuple[str, object]) -> pluggy.PluginManager:
    manager = pluggy.PluginManager("demo")
    manager.add_hookspecs(Spec)
    for name, plugin in plugins:
        manager.register(plugin, name)
    return manager


def test_defaults_answer_in_their_order_then_the_others_in_registration_order() -> None:
    manager = manager_of(
        ("conftest-1", answering("conftest-1")),
        ("c", answering("c")),
        ("a", answering("a", tryfirst=True)),
        ("b", answering("b", trylast=True)),
        ("conftest-2", answering("conftest-2")),
    )
    seen: list[str] = []
    answers = answers_in_order(manager, "demo_hook", ["a", "b", "c", "blocked"], seen=seen)
    assert [answer.result for answer in answers] == ["a", "b", "c", "conftest-1", "conftest-2"]
    assert seen == ["a", "b", "c", "conftest-2", "conftest-1"]  # pluggy's own calls
    assert [answer.plugin for answer in answers] == ["a", "b", "c", None, None]
    assert [answer.trylast for answer in answers] == [False, True, False, False, False]


def test_a_default_plugin_without_the_hook_gives_no_answer() -> None:
    class Silent:
        pass

    manager = manager_of(("a", Silent()), ("b", answering("b")))
    answers = answers_in_order(manager, "demo_hook", ["a", "b"], seen=[])
    assert [(answer.plugin, answer.result) for answer in answers] == [("b", "b")]

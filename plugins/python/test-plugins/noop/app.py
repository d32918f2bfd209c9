"""``py-noop``: the floor of a Python plugin, for ``make bench-languages``: the raw generated
bindings, no SDK, no parsing, an empty answer. What a call of it costs, every Python plugin pays
before its first line runs. Never deploy it (it would delete every child of its parents)."""

import wit_world  # type: ignore[import-not-found]
from wit_world.imports import types  # type: ignore[import-not-found]


class WitWorld(wit_world.WitWorld):  # type: ignore[misc]
    def info(self) -> types.PluginInfo:
        kind = types.KindRef
        return types.PluginInfo(
            "py-noop", "0.1.0", kind("examples.reconhost.dev/v1alpha1", "WebApp"), [], [], False, False
        )

    def reconcile(self, request: types.Request) -> types.Response:
        return types.Response([], None, [], [], None, False, None)

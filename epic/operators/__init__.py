"""The operator registry: one place that turns a node config into its runtime logic.

The graph model (:mod:`epic.topology`) is pure configuration: nodes compute their output schemas
and validate without building anything. Both runtimes (``epic run`` and the Spark tasks) get a
node's operator from :func:`build`, which looks up the factory registered for the node's type
(the way Beam's direct runner builds evaluators through one registry by transform type).

    >>> import epic
    >>> from epic.operators import build
    >>> t = epic.Topology("doc")
    >>> s = t.source("s", epic.iterator_source([], schema={"ts": "int64"}, time="ts", unit="s"))
    >>> f = t.filter("f", s, lambda b: epic.pc.greater(b["ts"], 0))
    >>> type(build(t.node("f"))).__name__
    'FilterOperator'
"""

from __future__ import annotations

from typing import Callable

from ..errors import TopologyError
from ..timeunits import to_ticks
from ..topology import (CombineNode, ExpireNode, FilterNode, FlatMapNode, LateNode, MapNode, MergeNode, Node,
                        ProcessNode, SinkNode, SplitNode, WindowNode)
from ..windows import build_window_operator
from .late import LateOperator
from .merge import MergeOperator
from .process import OperatorProcess, ProcessOperator
from .sinks import SinkOperator
from .split import CombineOperator, SplitOperator
from .stateless import FilterOperator, FlatMapOperator, MapOperator

__all__ = ["build", "register", "FACTORIES"]

#: node type -> factory ``(node, **options) -> operator``
FACTORIES: dict[type, Callable] = {}


def register(node_type: type):
    """Register the operator factory of ``node_type`` (a decorator)."""
    def deco(factory: Callable) -> Callable:
        FACTORIES[node_type] = factory
        return factory
    return deco


def build(node: Node, *, clock: Callable[[], int] | None = None):
    """A fresh operator for ``node`` (``clock``: the wall clock a sink stamps delays with)."""
    for cls in type(node).__mro__:
        factory = FACTORIES.get(cls)
        if factory is not None:
            return factory(node, clock=clock)
    raise TopologyError(f"node {node.name!r}: no operator is registered for {type(node).__name__}."
                        " Fix: register one with epic.operators.register")


@register(MapNode)
def _map(node, **_):
    return MapOperator(node)


@register(FilterNode)
def _filter(node, **_):
    return FilterOperator(node)


@register(FlatMapNode)
def _flat_map(node, **_):
    return FlatMapOperator(node)


@register(WindowNode)
def _window(node, **_):
    s = node.input
    return build_window_operator(node.spec, node.aggregates, s.schema, s.time, s.unit,
                                 list(node.key) or None)


@register(ExpireNode)
def _expire(node, **_):
    s = node.input
    return build_window_operator(node.spec, node.aggregates, s.schema, s.time, s.unit,
                                 list(node.key) or None, expire=node.expire_index)


@register(LateNode)
def _late(node, **_):
    s = node.input
    return LateOperator(node.window, s.schema, s.time, node.lateness)


@register(ProcessNode)
def _process(node, **_):
    from ..process import Processor

    if not isinstance(node.processor, Processor):
        return OperatorProcess(node.processor, node.input.schema, node.outputs[0].schema,
                               node=node.name)
    return ProcessOperator(node.processor, node.input.schema, node.input.time,
                           node.outputs[0].schema, key=list(node.key) or None, node=node.name)


@register(SplitNode)
def _split(node, **_):
    return SplitOperator(node.query, node.n, node.input.schema,
                         [o.schema for o in node.outputs], node=node.name,
                         times=[o.time for o in node.outputs])


@register(MergeNode)
def _merge(node, **_):
    s = node.inputs[0]
    idle = None if node.idle_after is None else to_ticks(node.idle_after, s.unit)
    return MergeOperator(len(node.inputs), s.schema, s.time, idle_after=idle, late=node.late,
                         name=node.name)


@register(CombineNode)
def _combine(node, **_):
    return CombineOperator(node.spec, node.input.schema, node.input.time)


@register(SinkNode)
def _sink(node, *, clock=None):
    s = node.input
    return SinkOperator(node.sink, s.schema, s.time, s.unit, node=node.name, clock=clock)

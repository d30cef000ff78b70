"""The execution graph: tasks on threads and streams, joined by typed happens-before edges."""

from .build import DEFAULT_GAP_THRESHOLD_US, build_graph
from .model import ALL_EDGE_CLASSES, EdgeClass, Graph, TaskKind, WaitKind

__all__ = ["build_graph", "Graph", "EdgeClass", "TaskKind", "WaitKind", "ALL_EDGE_CLASSES",
           "DEFAULT_GAP_THRESHOLD_US"]

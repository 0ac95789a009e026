"""GpuModel: a pod that names a GPU model runs only on nodes with that model.

Teams pin work to a GPU generation with an annotation (``example.com/gpu-model: A100``, or a list:
``A100,H100``); nodes carry their model as a label (``gpu.model``). Pods without the annotation
pass every node. Configuration (all optional), in the scheduler's TOML:

    [plugins.GpuModel]
    component = "gpu_model.wasm"
    config = { pod_annotation = "example.com/gpu-model", node_label = "gpu.model" }

Built with componentize-py against wasched's WIT (``wasched plugin build`` runs it).
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import types

VERSION = "1.0.0"
REASON = "node(s) didn't have the requested GPU model"


class State:
    """The instance's state. componentize-py makes a new WitWorld object for every call, so state
    lives at module level: one component instance holds one State."""

    def __init__(self) -> None:
        self.annotation = "example.com/gpu-model"
        self.label = "gpu.model"
        # node id -> the node's GPU model ("" when it has none)
        self.models: dict[int, str] = {}
        self.wanted: set[str] = set()


STATE = State()


class WitWorld(wit_world.WitWorld):
    def init(self, config: str) -> types.Descriptor:
        try:
            args = json.loads(config)
        except ValueError as e:
            raise Err(f"GpuModel config: {e}")
        if not isinstance(args, dict):
            raise Err("GpuModel config: expected a table")
        unknown = set(args) - {"pod_annotation", "node_label"}
        if unknown:
            raise Err(f"GpuModel config: unknown field(s) {', '.join(sorted(unknown))}")
        for field in ("pod_annotation", "node_label"):
            value = args.get(field)
            if value is not None and (not isinstance(value, str) or not value):
                raise Err(f"GpuModel config: {field} must be a non-empty string")
        STATE.annotation = args.get("pod_annotation", STATE.annotation)
        STATE.label = args.get("node_label", STATE.label)
        return types.Descriptor(
            name="GpuModel",
            version=VERSION,
            filter=True,
            score=False,
            normalize=types.NormalizeKind.NONE,
            reads_usage=False,
            # The host sends only the parts of the pod named here; the others arrive as None.
            reads_pod=types.PodParts.ANNOTATIONS,
        )

    def upsert_nodes(self, nodes: list[tuple[int, types.NodeInfo]]) -> None:
        for node_id, node in nodes:
            STATE.models[node_id] = next((v for k, v in node.labels if k == STATE.label), "")

    def remove_nodes(self, ids: list[int]) -> None:
        for node_id in ids:
            STATE.models.pop(node_id, None)

    def update_usage(self, usage: list[tuple[int, types.NodeUsage]]) -> None:
        pass

    def set_pod(self, pod: types.Pod) -> types.PodPlan:
        value = next((v for k, v in pod.annotations or [] if k == STATE.annotation), "")
        STATE.wanted = {m.strip() for m in value.split(",") if m.strip()}
        plan = types.FilterPlan_Run() if STATE.wanted else types.FilterPlan_Skip()
        return types.PodPlan(filter=plan, score=False)

    def filter(self, nodes: list[int]) -> types.FilterResults:
        failures = [types.Failure(code=types.Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons=[REASON])]
        verdicts = [0 if STATE.models.get(n, "") in STATE.wanted else 1 for n in nodes]
        return types.FilterResults(verdicts=verdicts, failures=failures if 1 in verdicts else [])

    def score(self, nodes: list[int]) -> list[int]:
        return [0 for _ in nodes]

    def normalize(self, scores: list[int]) -> list[int]:
        return scores

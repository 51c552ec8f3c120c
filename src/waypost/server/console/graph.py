"""A definition drawn as a graph: an inline SVG, laid out on the server, no script.

`render_graph(definition, states)` is the whole interface. The layout is a
layered one: transitions that close a loop are set aside (a depth-first walk
from the start finds them), every other step goes one layer below the deepest
step that leads to it, and the steps of a layer are ordered by the mean
position of their predecessors, so edges cross little. A parallel step leads
to the start of each branch, a map step to the start of its iterator ("each
item"); the steps that end a branch or the iterator lead to the step's `next`
(the join). Loop edges are drawn dashed, beside the nodes; so are the edges of
`catch` rules, labelled with the errors they catch.

Every text that comes from a definition or a run (step ids, expressions,
states) is escaped, and characters XML refuses are replaced, so a hostile
definition cannot put markup into the page. A definition is at most a few
dozen steps (the validator's limit), which keeps the quadratic parts cheap.

`for_run` is what the run page asks: a definition run's graph with each step
coloured by the state its history gives it (`step_states`), or None for a code
workflow (the page lists its steps so far instead).
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from waypost.errors import WaypostError
from waypost.model import operations as ops
from waypost.model.definitions import Definition
from waypost.model.definitions.format import inner_scopes
from waypost.model.events import Event, EventType
from waypost.model.identity import Principal
from waypost.model.records import RunInfo

__all__ = ["STATE_COLOURS", "for_run", "render_graph", "step_states"]

STATE_COLOURS: Mapping[str, tuple[str, str]] = {
    # state: (fill, stroke)
    "pending": ("#ffffff", "#9aa5b1"),
    "running": ("#dbeafe", "#2563eb"),
    "scheduled": ("#dbeafe", "#2563eb"),
    "waiting": ("#fef3c7", "#d97706"),
    "completed": ("#dcfce7", "#16a34a"),
    "failed": ("#fee2e2", "#dc2626"),
    "suspended": ("#fee2e2", "#b91c1c"),
    "skipped": ("#f3f4f6", "#6b7280"),
    "compensated": ("#ede9fe", "#7c3aed"),
    "cancelled": ("#f3f4f6", "#374151"),
}
_UNKNOWN = ("#ffffff", "#9aa5b1")

NODE_WIDTH = 184
NODE_HEIGHT = 46
GAP_X = 36
GAP_Y = 54
MARGIN = 24
MAX_LABEL = 22
MAX_EDGE_LABEL = 28
WAYPOINT = "\x00"  # names of layout waypoints start with it; no step id can
WAYPOINT_WIDTH = 16
MAX_TITLE = 300  # the tooltip's full text, within reason

# XML 1.0 allows tab, newline and carriage return among the control characters, and
# no surrogates; everything else of that kind becomes U+FFFD.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


@dataclass(frozen=True)
class _Edge:
    source: str
    target: str
    label: str
    back: bool = False
    dashed: bool = False  # a catch rule's: where a failure goes


def _text(value: Any, most: int = MAX_TITLE) -> str:
    """`value`, shortened to `most` characters, as text safe in an element or attribute."""
    return html.escape(_NOT_XML.sub("\ufffd", _shortened(str(value), most)), quote=True)


def _shortened(value: str, most: int) -> str:
    return value if len(value) <= most else value[: most - 1] + "\u2026"


def _collect(
    steps: Mapping[str, Any],
    join: str | None,
    nodes: dict[str, Mapping[str, Any]],
    edges: list[_Edge],
) -> None:
    """Add the steps of one scope (the top level or a branch) and their transitions."""
    for step_id, step in steps.items():
        if not isinstance(step, Mapping):
            continue
        nodes[str(step_id)] = step
    for step_id, step in steps.items():
        if not isinstance(step, Mapping):
            continue
        source = str(step_id)
        leaves = False
        for name in ("next", "default", "on_reject", "on_expiry", "on_timeout"):
            if isinstance(step.get(name), str):
                edges.append(_Edge(source, step[name], "" if name == "next" else name))
                leaves = leaves or name in ("next", "default")
        choices = step.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, Mapping) and isinstance(choice.get("next"), str):
                    when = choice.get("when")
                    edges.append(_Edge(source, choice["next"], str(when) if when else ""))
        catch = step.get("catch")
        for rule in catch if isinstance(catch, list) else ():
            if isinstance(rule, Mapping) and isinstance(rule.get("next"), str):
                names = rule.get("errors")
                caught = ", ".join(map(str, names)) if isinstance(names, list) else ""
                edges.append(_Edge(source, rule["next"], f"catch {caught}", dashed=True))
        kind = step.get("type")
        scopes = inner_scopes(step) if kind in ("parallel", "map") else []
        if scopes:
            branch_join = step.get("next") if isinstance(step.get("next"), str) else None
            for index, (_, branch) in enumerate(scopes):
                if not isinstance(branch, Mapping) or not isinstance(branch.get("steps"), Mapping):
                    continue
                if isinstance(branch.get("start"), str):
                    label = "each item" if kind == "map" else f"branch {index + 1}"
                    edges.append(_Edge(source, branch["start"], label))
                _collect(branch["steps"], branch_join, nodes, edges)
            # The step's `next` is reached through its branches (or iterator), not directly.
            direct = _Edge(source, branch_join, "") if branch_join is not None else None
            edges[:] = [e for e in edges if e != direct]
            if branch_join is not None and not any(
                isinstance(b, Mapping) and b.get("steps") for _, b in scopes
            ):
                edges.append(_Edge(source, branch_join, ""))
        elif join is not None and kind not in ("succeed", "fail") and not leaves:
            edges.append(_Edge(source, join, "join"))


def _graph(data: Mapping[str, Any]) -> tuple[list[str], list[_Edge], dict[str, Mapping[str, Any]]]:
    nodes: dict[str, Mapping[str, Any]] = {}
    edges: list[_Edge] = []
    steps = data.get("steps")
    if isinstance(steps, Mapping):
        _collect(steps, None, nodes, edges)
    # Two transitions between the same steps (`on_reject` and `on_expiry` to one
    # step, say) are drawn as one edge carrying both labels.
    merged: dict[tuple[str, str], list[str]] = {}
    dashed: dict[tuple[str, str], bool] = {}
    for edge in edges:
        if edge.target in nodes:
            labels = merged.setdefault((edge.source, edge.target), [])
            if edge.label not in labels:
                labels.append(edge.label)
            key = (edge.source, edge.target)
            dashed[key] = dashed.get(key, True) and edge.dashed
    edges = [
        _Edge(
            source,
            target,
            " / ".join(label for label in labels if label),
            dashed=dashed[(source, target)],
        )
        for (source, target), labels in merged.items()
    ]
    order = list(nodes)
    start = data.get("start")
    if isinstance(start, str) and start in nodes:
        order.remove(start)
        order.insert(0, start)
    return order, edges, nodes


def _mark_back_edges(order: list[str], edges: list[_Edge]) -> list[_Edge]:
    """The edges with those that close a cycle marked `back` (iterative depth-first walk)."""
    out: dict[str, list[int]] = {node: [] for node in order}
    for index, edge in enumerate(edges):
        out[edge.source].append(index)
    back: set[int] = set()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in order:
        if root in state:
            continue
        state[root] = 1
        stack: list[tuple[str, int]] = [(root, 0)]
        while stack:
            node, position = stack[-1]
            if position < len(out[node]):
                stack[-1] = (node, position + 1)
                index = out[node][position]
                target = edges[index].target
                if state.get(target) == 1:
                    back.add(index)
                elif target not in state:
                    state[target] = 1
                    stack.append((target, 0))
            else:
                state[node] = 2
                stack.pop()
    return [
        _Edge(e.source, e.target, e.label, back=i in back, dashed=e.dashed)
        for i, e in enumerate(edges)
    ]


def _layers(order: list[str], edges: list[_Edge]) -> tuple[list[list[str]], dict[int, list[str]]]:
    """Steps by layer, each below the deepest of its (forward) predecessors.

    An edge that spans several layers passes through a waypoint in each layer
    between (a narrow node of its own, ordered with the steps), so that it goes
    round the steps in its way instead of through them. Answers the layers and,
    for each such edge (by index), its waypoints from top to bottom.
    """
    incoming: dict[str, list[str]] = {node: [] for node in order}
    for edge in edges:
        if not edge.back:
            incoming[edge.target].append(edge.source)
    depth: dict[str, int] = {}
    remaining = list(order)
    while remaining:  # the forward edges form a DAG, so each pass places at least one step
        left = []
        for node in remaining:
            if all(p in depth for p in incoming[node]):
                depth[node] = max((depth[p] + 1 for p in incoming[node]), default=0)
            else:
                left.append(node)
        if len(left) == len(remaining):  # unreachable in a DAG; stay total anyway
            for node in left:
                depth[node] = 0
            break
        remaining = left
    layers: list[list[str]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for node in order:
        layers[depth[node]].append(node)
    waypoints: dict[int, list[str]] = {}
    for index, edge in enumerate(edges):
        low, high = depth[edge.source], depth[edge.target]
        if edge.back or high - low < 2:
            continue
        chain = [f"{WAYPOINT}{index}:{layer}" for layer in range(low + 1, high)]
        waypoints[index] = chain
        for previous, point in zip([edge.source, *chain], chain, strict=False):
            incoming[point] = [previous]
            layers[depth[previous] + 1].append(point)
            depth[point] = depth[previous] + 1
        before = incoming[edge.target]
        incoming[edge.target] = [chain[-1] if p == edge.source else p for p in before]
    # Order each layer by the mean position of its predecessors in the layer above.
    position = {node: float(i) for i, node in enumerate(layers[0])} if layers else {}
    for layer in layers[1:]:

        def key(node: str) -> float:
            placed = [position[p] for p in incoming[node] if p in position]
            return sum(placed) / len(placed) if placed else float("inf")

        layer.sort(key=key)
        for i, node in enumerate(layer):
            position[node] = float(i)
    return layers, waypoints


def _width(node: str) -> float:
    return WAYPOINT_WIDTH if node.startswith(WAYPOINT) else NODE_WIDTH


def render_graph(
    definition: Definition | Mapping[str, Any],
    states: Mapping[str, str] | None = None,
    *,
    title: str | None = None,
) -> str:
    """The definition's steps and transitions as an inline `<svg>` element (a string).

    `definition` is a parsed `Definition` or its data (the canonical body a
    published version stores, `DefinitionInfo.body`). `states` maps step ids to
    a state (`pending`, `running`, `waiting`, `completed`, `failed`,
    `suspended`, `skipped`, `compensated`, `cancelled`; see `STATE_COLOURS`),
    which colours the step and is written under its type; a step not in it is
    drawn plain, an unknown state is shown as written. `title` becomes the
    image's accessible name. The result is safe to insert into a page as is
    (every text escaped); it has its natural size, and a stylesheet rule such as
    `svg.wp-graph { max-width: 100%; height: auto }` shrinks it into a narrow page.
    """
    data = definition.data if isinstance(definition, Definition) else definition
    states = states or {}
    order, edges, nodes = _graph(data)
    edges = _mark_back_edges(order, edges)
    layers, waypoints = _layers(order, edges)
    row_widths = [sum(_width(n) for n in layer) + (len(layer) - 1) * GAP_X for layer in layers]
    back_room = 60 if any(e.back for e in edges) else 0
    width = MARGIN * 2 + max(row_widths, default=NODE_WIDTH) + back_room
    height = MARGIN * 2 + len(layers) * NODE_HEIGHT + max(len(layers) - 1, 0) * GAP_Y
    centre: dict[str, tuple[float, float]] = {}
    for row, layer in enumerate(layers):
        x = (width - back_room - row_widths[row]) / 2
        y = MARGIN + row * (NODE_HEIGHT + GAP_Y) + NODE_HEIGHT / 2
        for node in layer:
            centre[node] = (x + _width(node) / 2, y)
            x += _width(node) + GAP_X

    name = title if title is not None else data.get("name", "workflow")
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="wp-graph" role="img"'
        f' viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" height="{height:.0f}"'
        ' font-family="system-ui, sans-serif" font-size="13">',
        f"<title>{_text(name)}</title>",
        '<defs><marker id="wp-arrow" viewBox="0 0 10 10" refX="10" refY="5"'
        ' markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#64748b"/></marker></defs>',
    ]
    ports = _ports(edges, centre, waypoints)
    for index, edge in enumerate(edges):
        through = [centre[point] for point in waypoints.get(index, [])]
        parts.append(_edge_svg(edge, centre, ports[index], through, width - back_room))
    for node in order:
        parts.append(_node_svg(node, nodes[node], states.get(node), centre[node]))
    parts.append("</svg>")
    return "".join(parts)


def _ports(
    edges: list[_Edge],
    centre: Mapping[str, tuple[float, float]],
    waypoints: Mapping[int, list[str]],
) -> list[tuple[float, float]]:
    """For each edge, where it leaves its source and enters its target (x offsets).

    The edges leaving a step's bottom are spread along it in the order of where
    they go from left to right, and likewise the edges entering a step's top, so
    that edges do not all meet in one point.
    """
    leaving: dict[str, list[tuple[float, int]]] = {}
    entering: dict[str, list[tuple[float, int]]] = {}
    for index, edge in enumerate(edges):
        if edge.back or centre[edge.target][1] <= centre[edge.source][1]:
            continue
        chain = waypoints.get(index, [])
        towards = centre[chain[0] if chain else edge.target][0]
        coming = centre[chain[-1] if chain else edge.source][0]
        leaving.setdefault(edge.source, []).append((towards, index))
        entering.setdefault(edge.target, []).append((coming, index))
    offsets = [[0.0, 0.0] for _ in edges]
    usable = NODE_WIDTH * 0.6
    for side, group in enumerate((leaving, entering)):
        for ends in group.values():
            ends.sort()
            for rank, (_, index) in enumerate(ends):
                if len(ends) > 1:
                    offsets[index][side] = -usable / 2 + usable * rank / (len(ends) - 1)
    return [(a, b) for a, b in offsets]


def _edge_svg(
    edge: _Edge,
    centre: Mapping[str, tuple[float, float]],
    port: tuple[float, float],
    through: list[tuple[float, float]],
    right: float,
) -> str:
    (x1, y1), (x2, y2) = centre[edge.source], centre[edge.target]
    label = _shortened(edge.label, MAX_EDGE_LABEL)
    title = f"<title>{_text(edge.source)} \u2192 {_text(edge.target)}"
    title += f": {_text(edge.label)}</title>" if edge.label else "</title>"
    kind = "wp-edge wp-catch" if edge.dashed else "wp-edge"
    attributes = (
        f'class="{kind}" data-from="{_text(edge.source)}" data-to="{_text(edge.target)}"'
        ' fill="none" stroke="#64748b" stroke-width="1.4" marker-end="url(#wp-arrow)"'
    )
    if edge.back or y2 <= y1:
        # A loop (or a same-layer edge): leave by the right side, come back in by the right.
        sx, sy = x1 + NODE_WIDTH / 2, y1
        tx, ty = x2 + NODE_WIDTH / 2, y2
        bend = max(sx, tx) + 30 if edge.back else max(sx, tx) + 20
        bend = min(bend, right + 50)
        path = f"M{sx:.1f},{sy:.1f} C{bend:.1f},{sy:.1f} {bend:.1f},{ty:.1f} {tx:.1f},{ty:.1f}"
        lx, ly = bend - 4, (sy + ty) / 2
        dash = ' stroke-dasharray="5 4"'
        anchor = "end"
    else:
        sx, sy = x1 + port[0], y1 + NODE_HEIGHT / 2
        tx, ty = x2 + port[1], y2 - NODE_HEIGHT / 2
        # Down through each waypoint: a curve into its top, a straight line to its bottom.
        points = [(sx, sy)]
        for wx, wy in through:
            points += [(wx, wy - NODE_HEIGHT / 2), (wx, wy + NODE_HEIGHT / 2)]
        points.append((tx, ty))
        path = f"M{sx:.1f},{sy:.1f}"
        for k in range(0, len(points) - 1, 2):
            (ax, ay), (bx, by) = points[k], points[k + 1]
            mid = (ay + by) / 2
            path += f" C{ax:.1f},{mid:.1f} {bx:.1f},{mid:.1f} {bx:.1f},{by:.1f}"
            if k + 2 < len(points):
                path += f" L{points[k + 2][0]:.1f},{points[k + 2][1]:.1f}"
        (ax, ay), (bx, by) = points[0], points[1]
        lx, ly = (ax + bx) / 2, (ay + by) / 2 - 3
        dash = ' stroke-dasharray="3 3"' if edge.dashed else ""
        anchor = "middle"
    text = (
        f'<text x="{lx:.1f}" y="{ly:.1f}" text-anchor="{anchor}" font-size="11"'
        f' fill="#475569" paint-order="stroke" stroke="#ffffff" stroke-width="3">'
        f"{_text(label)}</text>"
        if label
        else ""
    )
    return f'<g {attributes}{dash}>{title}<path d="{path}"/>{text}</g>'


def _node_svg(
    node: str, step: Mapping[str, Any], state: str | None, at: tuple[float, float]
) -> str:
    x, y = at[0] - NODE_WIDTH / 2, at[1] - NODE_HEIGHT / 2
    fill, stroke = STATE_COLOURS.get(state, _UNKNOWN) if state else _UNKNOWN
    kind = str(step.get("type", "step"))
    css_state = state if state in STATE_COLOURS else "none" if state is None else "other"
    caption = f"{kind} \u00b7 {state}" if state else kind
    width = "2.5" if state in ("running", "waiting", "failed", "suspended") else "1.5"
    return (
        f'<g class="wp-step wp-state-{css_state}" data-step="{_text(node)}"'
        f' data-state="{_text(state or "")}">'
        f"<title>{_text(node)} ({_text(caption)})</title>"
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{NODE_WIDTH}" height="{NODE_HEIGHT}" rx="8"'
        f' fill="{fill}" stroke="{stroke}" stroke-width="{width}"/>'
        f'<text x="{at[0]:.1f}" y="{at[1] - 4:.1f}" text-anchor="middle" font-weight="600"'
        f' fill="#0f172a">{_text(_shortened(node, MAX_LABEL))}</text>'
        f'<text x="{at[0]:.1f}" y="{at[1] + 13:.1f}" text-anchor="middle" font-size="11"'
        f' fill="#475569">{_text(_shortened(caption, MAX_LABEL + 6))}</text>'
        "</g>"
    )


# == a run's steps on its definition's graph ================================================
_SITE = re.compile(r" v\d+ step (?P<step>\S+)$")


def _site_step(data: Mapping[str, Any]) -> str | None:
    """The definition step an event belongs to: its `site` names it (`NAME vN step ID`)."""
    found = _SITE.search(str(data.get("site") or ""))
    return found["step"] if found else None


def step_states(events: list[Event], waiting_for: list[dict[str, Any]]) -> dict[str, str]:
    """Each definition step the history reached, with its state.

    A step is `waiting` while the run waits for it (an approval, a signal, a timer),
    `running` while one of its activity attempts is due or under way, `failed` when
    its activity failed for good or it ended the run badly, `suspended` when the run
    was suspended there, `skipped` when an operator skipped it, and `completed`
    once the run went past it. Steps the run has not reached are left out.
    """
    states: dict[str, str] = {}
    by_number: dict[str, str] = {}  # the history's step numbers -> definition step ids
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        step = _site_step(data)
        number = data.get("step")
        if step is None and isinstance(number, str):
            step = by_number.get(number)
        if step is None:
            continue
        if isinstance(number, str):
            by_number[number] = step
        failed = event.type == EventType.ACTIVITY_FAILED and not data.get("retrying")
        if failed or event.type == EventType.RUN_FAILED:
            states[step] = "failed"
        elif event.type == EventType.RUN_SUSPENDED:
            states[step] = "suspended"
        elif event.type == EventType.STEP_SKIPPED:
            states[step] = "skipped"
        elif states.get(step) not in ("failed", "skipped"):
            states[step] = "completed"
    for wait in waiting_for:
        number = wait.get("step")
        step = _site_step(wait) or (by_number.get(number) if isinstance(number, str) else None)
        if step is not None and states.get(step) != "failed":
            states[step] = "running" if wait.get("kind") == "activity" else "waiting"
    return states


def passed_choices(body: Mapping[str, Any], states: dict[str, str]) -> dict[str, str]:
    """`states` with each choice step the run went through marked `completed`.

    A choice leaves no event of its own; the run passed it when a step it leads to
    was reached (choices that lead to choices included).
    """
    _, edges, nodes = _graph(body)
    states = dict(states)
    changed = True
    while changed:
        changed = False
        for edge in edges:
            choice = nodes[edge.source].get("type") == "choice"
            if choice and edge.target in states and edge.source not in states:
                states[edge.source] = "completed"
                changed = True
    return states


async def for_run(engine: Any, principal: Principal, info: RunInfo, events: list[Event]) -> Any:
    """The run's definition drawn with its steps' states (markup), or None.

    None for a run of a code workflow, and when the caller may not read the
    definition (the door says so); the run page then lists the steps so far.
    """
    if not events or events[0].type != EventType.RUN_STARTED:
        return None
    first = events[0].data if isinstance(events[0].data, dict) else {}
    pinned = first.get("definition")
    if not isinstance(pinned, dict):
        return None
    name, version = pinned.get("name"), pinned.get("version")
    # A migrated run goes on on the version its last RunMigrated names.
    for event in events:
        data = event.data if isinstance(event.data, dict) else {}
        if event.type == EventType.RUN_MIGRATED and isinstance(data.get("to_version"), int):
            version = data["to_version"]
    if not isinstance(name, str) or not isinstance(version, int):
        return None
    try:
        published = await engine.execute(
            ops.GetDefinition(definition=name, version=version), principal
        )
    except WaypostError:
        return None
    states = passed_choices(published.body, step_states(events, info.waiting_for))
    title = f"{name} v{version}: the run's steps"
    return Markup(render_graph(published.body, states, title=title))  # escaped by render_graph

"""A routes XML in Bench2Drive's shape, for the sim's evaluators (ops/ must not depend on tests/data).

The first ten routes are Bench2Drive's Dev10 subset (ids, towns, scenarios, start/end points from
leaderboard/data/drivetransformer_bench2drive_dev10.xml); waypoints in between are interpolated, since
the fake evaluator only counts routes and reads their ids, towns and scenario names. More than ten
routes repeat the list with new ids.
"""
from __future__ import annotations

from dataclasses import dataclass
from xml.sax.saxutils import quoteattr


@dataclass(frozen=True)
class RouteTemplate:
    id: int
    town: str
    scenario: str                     # the scenario's type; its name is f"{type}_1"
    start: tuple[float, float, float]
    end: tuple[float, float, float]
    yaw: float
    road_id: int | None = None


DEV10: tuple[RouteTemplate, ...] = (
    RouteTemplate(3514, "Town13", "ParkingExit", (4745.3, 3984.1, 156.4), (4611.3, 3984.8, 153.6), 179.7, 892),
    RouteTemplate(3255, "Town13", "ParkingCrossingPedestrian", (4170.3, 787.6, 178.2), (4052.3, 788.6, 179.8),
                  179.5, 1237),
    RouteTemplate(26405, "Town15", "StaticCutIn", (735.6, 750.5, 118.0), (864.3, 776.3, 118.9), 30.8, 137),
    RouteTemplate(25381, "Town05", "HazardAtSideLane", (-16.9, -207.5, 1.6), (-151.9, -207.0, 10.0), -179.9, 37),
    RouteTemplate(25378, "Town03", "YieldToEmergencyVehicle", (113.9, 193.2, 1.6), (17.7, 193.5, 0.0), 179.9),
    RouteTemplate(25424, "Town11", "ConstructionObstacleTwoWays", (7445.9, -2120.2, 54.2),
                  (7496.2, -2215.7, 53.5), 297.6, 269),
    RouteTemplate(2091, "Town12", "NonSignalizedJunctionLeftTurn", (2773.3, 1633.8, 343.6),
                  (2727.7, 1596.4, 345.0), 269.8),
    RouteTemplate(27494, "Town04", "BlockedIntersection", (162.9, -237.9, 0.0), (205.0, -295.1, 0.0), -18.0, 16),
    RouteTemplate(17569, "Town12", "SequentialLaneChange", (3122.9, 6267.1, 371.8), (3008.3, 6255.4, 370.4),
                  -170.7, 1157),
    RouteTemplate(28198, "Town15", "SignalizedJunctionLeftTurnEnterFlow", (961.1, 404.2, 122.8),
                  (1017.5, 417.1, 122.7), 74.9, 234),
)

_WEATHER = ('<weather cloudiness="{c}" fog_density="10.0" precipitation="0.0" precipitation_deposits="0.0" '
            'route_percentage="{p}" sun_altitude_angle="45.0" sun_azimuth_angle="90.0" wetness="0.0" '
            'wind_intensity="10.0" />')


def route_ids(n: int) -> list[int]:
    return [t.id if k == 0 else t.id + 100000 * k for k, t in _cycle(n)]


def _cycle(n: int):
    for i in range(n):
        yield i // len(DEV10), DEV10[i % len(DEV10)]


def _route_xml(rid: int, t: RouteTemplate, points: int = 8) -> str:
    road = f' road_id="{t.road_id}"' if t.road_id is not None else ""
    lines = [f'   <route id="{rid}"{road} town={quoteattr(t.town)}>', "         <waypoints>"]
    for k in range(points):
        f = k / (points - 1)
        x, y, z = (round(a + (b - a) * f, 1) for a, b in zip(t.start, t.end))
        lines.append(f'            <position x="{x}" y="{y}" z="{z}" />')
    sx, sy, sz = t.start
    lines += ["         </waypoints>", "         <scenarios>",
              f'            <scenario name="{t.scenario}_1" type="{t.scenario}">',
              f'               <trigger_point x="{sx}" y="{sy}" yaw="{t.yaw}" z="{sz}" />',
              "            </scenario>", "         </scenarios>", "         <weathers>",
              "            " + _WEATHER.format(c="20.0", p="0"),
              "            " + _WEATHER.format(c="20.0", p="100"),
              "         </weathers>", "   </route>"]
    return "\n".join(lines)


def routes_xml(n: int) -> str:
    """A Bench2Drive-style routes file with n routes (n >= 1)."""
    if n < 1:
        raise ValueError("a routes file needs at least one route")
    body = "\n\n".join(_route_xml(rid, t) for rid, (_, t) in zip(route_ids(n), _cycle(n)))
    return f"<routes>\n{body}\n</routes>\n"

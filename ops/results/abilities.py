"""Bench2Drive's five driving abilities and which scenario types count toward each.

The table is the fact stated in Bench2Drive's tools/ability_benchmark.py (v0.0.4): a route belongs to
every ability whose list holds the `type` of the route's FIRST <scenario>; one type may count for two
abilities (BlockedIntersection is Emergency_Brake and Traffic_Signs). An ability's value is the success
share of the *recorded* routes of its types (routes without a record are left out, as that tool does).

Traffic_Signs: the tool gives a failed route partial credit when it got past its first junction without a
red-light or stop infraction, which needs CARLA's OpenDRIVE maps to find the junction. Without map data
the value here counts successes only, so it is a lower bound whenever a Traffic_Signs route failed.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

OVERTAKING, MERGING, EMERGENCY_BRAKE, GIVE_WAY, TRAFFIC_SIGNS = (
    "Overtaking", "Merging", "Emergency_Brake", "Give_Way", "Traffic_Signs")
ABILITY_NAMES: tuple[str, ...] = (OVERTAKING, MERGING, EMERGENCY_BRAKE, GIVE_WAY, TRAFFIC_SIGNS)

ABILITY_TYPES: Mapping[str, frozenset[str]] = {
    OVERTAKING: frozenset({
        "Accident", "AccidentTwoWays", "ConstructionObstacle", "ConstructionObstacleTwoWays",
        "HazardAtSideLaneTwoWays", "HazardAtSideLane", "ParkedObstacleTwoWays", "ParkedObstacle",
        "VehicleOpensDoorTwoWays"}),
    MERGING: frozenset({
        "CrossingBicycleFlow", "EnterActorFlow", "HighwayExit", "InterurbanActorFlow", "HighwayCutIn",
        "InterurbanAdvancedActorFlow", "MergerIntoSlowTrafficV2", "MergerIntoSlowTraffic",
        "NonSignalizedJunctionLeftTurn", "NonSignalizedJunctionRightTurn",
        "NonSignalizedJunctionLeftTurnEnterFlow", "ParkingExit", "SequentialLaneChange",
        "SignalizedJunctionLeftTurn", "SignalizedJunctionRightTurn", "SignalizedJunctionLeftTurnEnterFlow"}),
    EMERGENCY_BRAKE: frozenset({
        "BlockedIntersection", "DynamicObjectCrossing", "HardBreakRoute", "OppositeVehicleTakingPriority",
        "OppositeVehicleRunningRedLight", "ParkingCutIn", "PedestrianCrossing", "ParkingCrossingPedestrian",
        "StaticCutIn", "VehicleTurningRoute", "VehicleTurningRoutePedestrian", "ControlLoss"}),
    GIVE_WAY: frozenset({"InvadingTurn", "YieldToEmergencyVehicle"}),
    TRAFFIC_SIGNS: frozenset({
        "BlockedIntersection", "OppositeVehicleTakingPriority", "OppositeVehicleRunningRedLight",
        "PedestrianCrossing", "VehicleTurningRoute", "VehicleTurningRoutePedestrian", "EnterActorFlow",
        "CrossingBicycleFlow", "NonSignalizedJunctionLeftTurn", "NonSignalizedJunctionRightTurn",
        "NonSignalizedJunctionLeftTurnEnterFlow", "SignalizedJunctionLeftTurn", "SignalizedJunctionRightTurn",
        "SignalizedJunctionLeftTurnEnterFlow", "T_Junction", "VanillaNonSignalizedTurn",
        "VanillaSignalizedTurnEncounterGreenLight", "VanillaSignalizedTurnEncounterRedLight",
        "VanillaNonSignalizedTurnEncounterStopsign"}),
}


def abilities_of(scenario_type: str | None) -> tuple[str, ...]:
    """The abilities a route counts toward, in ABILITY_NAMES order; () for an unlisted or absent type."""
    if scenario_type is None:
        return ()
    return tuple(name for name in ABILITY_NAMES if scenario_type in ABILITY_TYPES[name])


@dataclass(frozen=True)
class AbilityScore:
    name: str
    success: int        # recorded routes of this ability that are a success
    recorded: int       # recorded routes of this ability (the denominator)
    routes: int         # routes of this ability in the routes file, recorded or not
    lower_bound: bool   # True: partial credit that needs map data was not given (Traffic_Signs)

    @property
    def value(self) -> float | None:
        """Success share; None when no route of this ability is recorded (the tool would divide by 0)."""
        return self.success / self.recorded if self.recorded else None


def score_abilities(routes: Iterable[tuple[str | None, bool | None]]) -> dict[str, AbilityScore]:
    """Per ability from (scenario type, success) per route; success None = the route has no record."""
    success = dict.fromkeys(ABILITY_NAMES, 0)
    recorded = dict.fromkeys(ABILITY_NAMES, 0)
    total = dict.fromkeys(ABILITY_NAMES, 0)
    for scenario_type, ok in routes:
        for name in abilities_of(scenario_type):
            total[name] += 1
            if ok is not None:
                recorded[name] += 1
                success[name] += int(ok)
    # Partial credit only ever adds to a failed Traffic_Signs route: with none failed the value is exact.
    return {name: AbilityScore(name, success[name], recorded[name], total[name],
                               lower_bound=name == TRAFFIC_SIGNS and success[name] < recorded[name])
            for name in ABILITY_NAMES}


def ability_mean(scores: Mapping[str, AbilityScore]) -> float | None:
    """The tool's 'mean': the plain mean of the five values; None when any is unknown."""
    values = [s.value for s in scores.values()]
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None) / len(values)

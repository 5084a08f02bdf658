"""Bench2Drive's routes, checkpoint and resume semantics, re-implemented for the fake evaluator.

Behaviour follows Bench2Drive's leaderboard (route_indexer.py, statistics_manager.py,
checkpoint_tools.py at Thinklab-SJTU/Bench2Drive), because the console's resume rule is only right if
the sim reproduces the real traps:
- `validate_and_resume` rejects a checkpoint that is empty/unparseable, lacks `entry_status`, has
  `entry_status == "Invalid"`, lacks `_checkpoint.progress`, has `progress[1] != total`, or whose
  records' route ids differ from the routes file; the caller then *clears the file* (the wipe);
- otherwise it resumes at the first record (before progress[0]) whose status is `Failed`,
  `Failed - Simulation crashed` or `Failed - Agent crashed`, else at progress[0]; one earlier when
  `entry_status == "Crashed"`;
- records of routes in progress carry index -1 and are left out of the file; the file is written
  with a plain `json.dump(indent=4)` to the open file (a reader can catch it half-written).

The route *outcomes* are simulated: deterministic per route id, shaped like real ones.
"""
from __future__ import annotations

import json
import math
import os
import random
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Any

RESUME_STATUSES = ("Failed", "Failed - Simulation crashed", "Failed - Agent crashed")
ENTRY_STATUS_VALUES = ("Started", "Finished", "Rejected", "Crashed", "Invalid")
ELIGIBLE = {"Started": False, "Finished": True, "Rejected": False, "Crashed": False, "Invalid": False}
SENSOR_ICONS = ["carla_camera", "carla_imu", "carla_gnss", "carla_speedometer", "carla_lidar"]
INFRACTION_KEYS = ("collisions_layout", "collisions_pedestrian", "collisions_vehicle", "red_light",
                   "stop_infraction", "outside_route_lanes", "min_speed_infractions",
                   "yield_emergency_vehicle_infractions", "scenario_timeouts", "route_dev",
                   "vehicle_blocked")
PENALTY = {"collisions_pedestrian": 0.5, "collisions_vehicle": 0.6, "collisions_layout": 0.65,
           "red_light": 0.7, "stop_infraction": 0.8, "scenario_timeouts": 0.7,
           "yield_emergency_vehicle_infractions": 0.7}
LABELS = ["Avg. driving score", "Avg. route completion", "Avg. infraction penalty",
          "Collisions with pedestrians", "Collisions with vehicles", "Collisions with layout",
          "Red lights infractions", "Stop sign infractions", "Off-road infractions", "Route deviations",
          "Route timeouts", "Agent blocked", "Yield emergency vehicles infractions", "Scenario timeouts",
          "Min speed infractions"]


# ------------------------------------------------------------------------------------------------ routes

@dataclass(frozen=True)
class RouteConfig:
    index: int
    route_id: str           # the XML id
    repetition_index: int
    town: str
    scenario_name: str

    @property
    def name(self) -> str:
        return f"RouteScenario_{self.route_id}"

    @property
    def full_name(self) -> str:
        return f"{self.name}_rep{self.repetition_index}"


def _subset_ids(routes_subset: str) -> list[str]:
    ids: list[str] = []
    for group in routes_subset.replace(" ", "").split(","):
        if not group:
            continue
        if "-" in group:
            lo, hi = group.split("-")
            ids.extend(str(i) for i in range(int(lo), int(hi) + 1))
        else:
            ids.append(group)
    return ids


def parse_routes(path: str, routes_subset: str = "", repetitions: int = 1) -> list[RouteConfig]:
    """The `<route>` elements of a routes XML (ElementTree), filtered by subset, times repetitions."""
    root = ET.parse(path).getroot()
    wanted = set(_subset_ids(routes_subset)) if routes_subset else None
    configs: list[RouteConfig] = []
    i = 0
    for route in root.iter("route"):
        rid = route.attrib.get("id", str(i))
        if wanted is not None and rid not in wanted:
            continue
        scenario = route.find("scenarios/scenario")
        sname = scenario.attrib.get("name", "NoScenario") if scenario is not None else "NoScenario"
        for rep in range(repetitions):
            configs.append(RouteConfig(index=i * repetitions + rep, route_id=rid, repetition_index=rep,
                                       town=route.attrib.get("town", "Town12"), scenario_name=sname))
        i += 1
    return configs


def fetch_dict(path: str) -> dict:
    """Like checkpoint_tools.fetch_dict: {} when the file is missing or not valid JSON."""
    if not os.path.exists(path):
        return {}
    with open(path) as fd:
        try:
            data = json.load(fd)
        except json.JSONDecodeError:
            return {}
    return data if isinstance(data, dict) else {}


class RouteIndexer:
    def __init__(self, configs: list[RouteConfig]) -> None:
        self.configs = configs
        self.total = len(configs)
        self.index = 0

    def peek(self) -> bool:
        return self.index < self.total

    def get_next_config(self) -> RouteConfig | None:
        if self.index >= self.total:
            return None
        config = self.configs[self.index]
        self.index += 1
        return config

    def validate_and_resume(self, data: dict) -> tuple[bool, str]:
        """(resume?, the message Bench2Drive prints). Sets self.index when it resumes."""
        if not data:
            return False, "Problem reading checkpoint. Found no data"
        entry_status = data.get("entry_status")
        if not entry_status:
            return False, "Problem reading checkpoint. Given checkpoint is malformed"
        if entry_status == "Invalid":
            return False, "Problem reading checkpoint. The 'entry_status' is 'Invalid'"
        checkpoint = data.get("_checkpoint")
        if not checkpoint or "progress" not in checkpoint:
            return False, "Problem reading checkpoint. Given endpoint is malformed"
        progress = checkpoint["progress"]
        if progress[1] != self.total:
            return False, "Problem reading checkpoint. Endpoint's amount of routes does not match the given one"
        records = checkpoint.get("records") or []

        check_index = 0
        resume_index = progress[0]
        while check_index < resume_index:
            try:
                if self.configs[check_index].full_name != records[check_index]["route_id"]:
                    return False, "Problem reading checkpoint. Checkpoint routes don't match the current ones"
                if records[check_index]["status"] not in RESUME_STATUSES:
                    check_index += 1
                else:
                    resume_index = check_index
                    break
            except IndexError:
                # Bench2Drive's patch for "progress higher than the actual results".
                resume_index = max(check_index - 1, 0)

        self.index = max(0, resume_index - 1) if entry_status == "Crashed" else max(0, resume_index)
        return True, f"Resuming from route {self.index} of {self.total}"


# ------------------------------------------------------------------------------------------- statistics

def new_record() -> dict:
    return {"index": -1, "route_id": None, "scenario_name": None, "weather_id": None, "save_name": None,
            "status": "Started", "num_infractions": 0,
            "infractions": {**{k: [] for k in INFRACTION_KEYS}, "route_timeout": []},
            "scores": {"score_route": 0, "score_penalty": 0, "score_composed": 0},
            "meta": {"route_length": 0, "duration_game": 0, "duration_system": 0}}


@dataclass(frozen=True)
class Outcome:
    """What happened on a route: infraction messages, completion, and a failure message if any."""
    infractions: dict[str, list[str]]
    score_route: float
    outside_lanes_pct: float
    route_length: float
    failure: str = ""


def _at(rng: random.Random) -> str:
    return f"at (x={rng.uniform(-2000, 2000):.3f}, y={rng.uniform(-2000, 6000):.3f}, z={rng.uniform(0, 400):.3f})"


def simulate_outcome(config: RouteConfig) -> Outcome:
    """A plausible, deterministic outcome for a route (mostly Completed, some collisions/blocks)."""
    rng = random.Random(config.full_name)
    inf: dict[str, list[str]] = {k: [] for k in INFRACTION_KEYS}
    inf["route_timeout"] = []
    score_route, failure, lanes_pct = 100.0, "", 0.0
    if rng.random() < 0.10:
        score_route = round(rng.uniform(20.0, 95.0), 2)
        failure = "Agent got blocked"
        inf["vehicle_blocked"].append(f"Agent got blocked {_at(rng)}")
    if rng.random() < 0.15:
        inf["collisions_vehicle"].append(
            f"Agent collided against object with type=vehicle.lincoln.mkz_2017 and id={rng.randint(1000, 60000)} "
            f"{_at(rng)}")
    if rng.random() < 0.05:
        inf["collisions_layout"].append(
            f"Agent collided against object with type=static.prop.trafficcone01 and id={rng.randint(1000, 60000)} "
            f"{_at(rng)}")
    if rng.random() < 0.03:
        inf["red_light"].append(f"Agent ran a red light {rng.randint(1000, 9999)} {_at(rng)}")
    length = round(rng.uniform(60.0, 400.0), 3)
    if rng.random() < 0.05:
        lanes_pct = round(rng.uniform(0.5, 4.0), 2)
        meters = round(length * lanes_pct / 100, 3)
        inf["outside_route_lanes"].append(
            f"Agent went outside its route lanes for about {meters} meters ({lanes_pct}% of the completed route)")
    for _ in range(rng.randint(0, 8)):
        inf["min_speed_infractions"].append(
            f"Average speed is {rng.uniform(40, 190):.2f}% of the surrounding traffic's one")
    return Outcome(infractions=inf, score_route=score_route, outside_lanes_pct=lanes_pct,
                   route_length=length, failure=failure)


class Statistics:
    """The checkpoint file and what Bench2Drive's StatisticsManager keeps in memory for it."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.records: list[dict] = []
        self.global_record: dict = {}
        self.progress: list[int] = []
        self.entry_status = "Started"
        self.eligible = ELIGIBLE["Started"]
        self.sensors: list[str] = []
        self.values: list[str] = []
        self.total_routes = 0

    # --- the file
    def to_json(self) -> dict:
        return {"_checkpoint": {"global_record": self.global_record, "progress": self.progress,
                                # index -1 = a route in progress: not in the file until it is scored
                                "records": [r for r in self.records if r["index"] != -1]},
                "entry_status": self.entry_status, "eligible": self.eligible, "sensors": self.sensors,
                "values": self.values, "labels": LABELS if self.values else []}

    def write(self) -> None:
        # Deliberately not atomic: the real save_dict opens with 'w' and json.dumps into it.
        with open(self.endpoint, "w") as fd:
            json.dump(self.to_json(), fd, indent=4)

    def clear_records(self) -> None:
        """Bench2Drive truncates the checkpoint when it does not resume (the wipe)."""
        with open(self.endpoint, "w") as fd:
            fd.truncate(0)

    def add_file_records(self, data: dict) -> None:
        for record in (data.get("_checkpoint") or {}).get("records") or []:
            self.records.append(dict(record))

    # --- state
    def save_progress(self, index: int, total: int) -> None:
        self.progress = [index, total]
        self.total_routes = total

    def save_entry_status(self, status: str) -> None:
        if status not in ENTRY_STATUS_VALUES:
            raise ValueError(f"invalid entry_status {status!r}")
        self.entry_status = status
        self.eligible = ELIGIBLE[status]

    def create_route_data(self, config: RouteConfig, weather_id: str, save_name: str) -> None:
        record = new_record()
        record.update(route_id=config.full_name, scenario_name=config.scenario_name, weather_id=weather_id,
                      save_name=save_name)
        record["town_name"] = config.town
        if config.index < len(self.records):
            self.records[config.index] = record      # resuming: overwrite the old result
        else:
            self.records.append(record)

    def compute_route_statistics(self, index: int, outcome: Outcome | None, duration_system: float,
                                 duration_game: float, failure_message: str = "") -> dict:
        record = self.records[index]
        record["index"] = index
        for key in INFRACTION_KEYS:
            record["infractions"][key] = []
        record["meta"]["route_length"] = outcome.route_length if outcome else 0
        record["meta"]["duration_game"] = round(duration_game, 3)
        record["meta"]["duration_system"] = round(duration_system, 3)
        penalty, score_route = 1.0, 0.0
        if outcome is not None:
            for key, messages in outcome.infractions.items():
                record["infractions"][key] = list(messages)
                if key in PENALTY:
                    penalty *= PENALTY[key] ** len(messages)
            if outcome.outside_lanes_pct:
                penalty *= 1 - outcome.outside_lanes_pct / 100
            score_route = outcome.score_route
            failure_message = failure_message or outcome.failure
        record["scores"] = {"score_route": round(score_route, 6), "score_penalty": round(penalty, 6),
                            "score_composed": round(max(score_route * penalty, 0.0), 6)}
        record["num_infractions"] = sum(len(v) for v in record["infractions"].values())
        if score_route >= 100:   # like Bench2Drive: a completed route is never "Failed"
            record["status"] = "Completed" if record["num_infractions"] > 0 else "Perfect"
        else:
            record["status"] = "Failed" + (f" - {failure_message}" if failure_message else "")
        return record

    def compute_global_statistics(self) -> None:
        total = max(self.total_routes, 1)
        mean = {"score_composed": 0.0, "score_route": 0.0, "score_penalty": 0.0}
        meta: dict[str, Any] = {"total_length": 0.0, "duration_game": 0.0, "duration_system": 0.0,
                                "exceptions": []}
        result = "Perfect"
        for r in self.records:
            for k in mean:
                mean[k] += r["scores"][k] / total
            meta["total_length"] += r["meta"]["route_length"]
            meta["duration_game"] += r["meta"]["duration_game"]
            meta["duration_system"] += r["meta"]["duration_system"]
            status = "Failed" if "Failed" in r["status"] else r["status"]
            if status == "Failed":
                meta["exceptions"].append([r["route_id"], r["index"], r["status"]])
                result = "Failed"
            elif result == "Perfect" and status != "Perfect":
                result = status
        mean = {k: round(v, 6) for k, v in mean.items()}
        std = {k: 0.0 for k in mean}
        if total > 1:
            for k in std:
                std[k] = round(math.sqrt(sum((r["scores"][k] - mean[k]) ** 2 for r in self.records)
                                         / (total - 1)), 3)
        km = max(sum(r["meta"]["route_length"] / 1000 * r["scores"]["score_route"] / 100
                     for r in self.records), 0.001)
        infractions: dict[str, float] = {}
        for key in (*INFRACTION_KEYS, "route_timeout"):
            if key == "outside_route_lanes":
                value = sum((float(r["infractions"][key][0].split(" ")[8]) / 1000
                             for r in self.records if r["infractions"][key]), 0.0)
            else:
                value = sum(len(r["infractions"][key]) for r in self.records) / km
            infractions[key] = round(value, 3)
        self.global_record = {"index": -1, "route_id": -1, "status": result, "infractions": infractions,
                              "scores_mean": mean, "scores_std_dev": std, "meta": meta}
        self.values = [str(mean["score_composed"]), str(mean["score_route"]), str(mean["score_penalty"])] + [
            str(infractions[k]) for k in ("collisions_pedestrian", "collisions_vehicle", "collisions_layout",
                                          "red_light", "stop_infraction", "outside_route_lanes", "route_dev",
                                          "route_timeout", "vehicle_blocked",
                                          "yield_emergency_vehicle_infractions", "scenario_timeouts",
                                          "min_speed_infractions")]
        status = "Finished"
        for r in self.records:
            if "Simulation crashed" in r["status"]:
                status = "Crashed"
            elif "Agent's sensors were invalid" in r["status"]:
                status = "Rejected"
        self.save_entry_status(status)

    def validate_and_write(self, sensors_initialized: bool, crashed: bool) -> str:
        """Bench2Drive's final validation: sets 'Invalid' when the statistics are badly formed."""
        error = ""
        if sensors_initialized and not self.sensors:
            error = "Missing 'sensors' data"
        elif not self.values:
            error = "Missing 'values' data"
        elif self.entry_status == "Started":
            error = "'entry_status' has the 'Started' value"
        elif not self.global_record:
            error = "Missing 'global_records' data"
        elif not self.progress:
            error = "Missing 'progress' data"
        elif not crashed and (self.progress[0] != self.progress[1] or self.progress[0] != len(self.records)):
            error = "'progress' data doesn't match its expected value"
        elif any(r["status"] == "Started" for r in self.records):
            error = "Found a route record with missing data"
        if error:
            self.save_entry_status("Invalid")
        self.write()
        return error

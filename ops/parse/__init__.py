"""Pure parsers of tool outputs and evaluator files.

Every parser takes text (str, or bytes decoded as UTF-8), never raises on bad input, and returns a
frozen value or a ParseError carrying the offending excerpt, so that the probe above can answer
UNKNOWN with evidence. None of them does I/O.
"""
from ops.parse.checkpoint import (
    Checkpoint,
    RouteRecord,
    completed_records,
    driving_score,
    is_success,
    last_status,
    parse_checkpoint,
    penalty_for,
    record_penalty,
    resume_index,
    success_rate,
    wall_game_ratio,
)
from ops.parse.errors import ParseError
from ops.parse.netsh import ExclusionRange, ExclusionTable, parse_excluded_ranges
from ops.parse.nvsmi import (
    QUERY_XML_ARGS,
    SmiLog,
    XmlGpu,
    XmlProcess,
    parse_query_xml,
)
from ops.parse.routes import RoutesFile, checkpoint_route_id, parse_routes
from ops.parse.winproc import (
    PS_PROCESS_QUERY,
    WinProc,
    parse_creation_date,
    parse_win_processes,
    split_windows_cmdline,
)

__all__ = [
    "Checkpoint", "ExclusionRange", "ExclusionTable", "PS_PROCESS_QUERY",
    "ParseError", "QUERY_XML_ARGS", "RouteRecord", "RoutesFile",
    "SmiLog", "WinProc", "XmlGpu", "XmlProcess",
    "checkpoint_route_id", "completed_records", "parse_creation_date", "driving_score", "is_success", "last_status",
    "parse_checkpoint", "parse_excluded_ranges",
    "parse_query_xml", "parse_routes", "parse_win_processes", "penalty_for", "record_penalty", "resume_index",
    "split_windows_cmdline", "success_rate", "wall_game_ratio",
]

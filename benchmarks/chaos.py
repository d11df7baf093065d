"""Reliability campaigns against a loopback server, bounded in time; `make chaos` runs both.

  faults: `mslite-triton serve` as shipped under 8 Python-client and 8 raw-HTTP threads, every answer
          checked; process faults (kills, SIGSTOP, a second death during a heal) and client attacks, one
          row per fault and kind of client: outage seconds, ok, failed and wrong answers (`chaos_faults.py`).
  costs:  requests that cost everyone else, through the gateway: 300 requests of batch size 0, one request of
          4,000,000 strings, 8 threads of gzip bombs, keyless requests past a model's execute deadline, 4 on
          what connections hold; one row each with the bar (`chaos_costs.py`).

Run: .venv/bin/python -m benchmarks.chaos faults [--quick] [--faults worker-kill,gateway-stop,...]
     .venv/bin/python -m benchmarks.chaos costs [--attacks zero-batch,strings,gzip-bomb,execute-deadline]
"""

from __future__ import annotations

import argparse
import sys


def _chosen(parser: argparse.ArgumentParser, text: str, known: tuple[str, ...] | dict, what: str) -> list[str]:
    """Comma-separated names out of `known` (all of them, in order, when `text` is empty)."""
    chosen = [n for n in text.split(",") if n] or list(known)
    if unknown := [n for n in chosen if n not in known]:
        parser.error(f"unknown {what}(s) {unknown}; known: {', '.join(known)}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["faults", "costs"])
    parser.add_argument("--quick", action="store_true", help="faults: attacks of 3 s at most, shorter settling")
    parser.add_argument("--faults", default="", help="faults: comma-separated names (default: all, in order)")
    parser.add_argument("--attacks", default="", help="costs: comma-separated names (default: all, in order)")
    args = parser.parse_args()
    if args.mode == "faults":
        from benchmarks.chaos_faults import FAULTS, faults_campaign

        sys.exit(faults_campaign(_chosen(parser, args.faults, FAULTS, "fault"), args.quick))
    from benchmarks.chaos_costs import ATTACKS, costs_campaign

    sys.exit(costs_campaign(_chosen(parser, args.attacks, ATTACKS, "attack")))


if __name__ == "__main__":
    main()

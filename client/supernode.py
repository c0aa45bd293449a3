"""``edgeflex-supernode``: Flower's ``flower-supernode`` with short polls (flwr 1.42.x; on
another Flower the patches stand aside with a warning and it is Flower's own SuperNode).

Every argument is Flower's, plus ``--idle-poll-s`` (Flower's: 3 s), ``--reply-poll-s`` (0.5 s)
and ``--heartbeat-interval-s`` (30 s; the SuperLink drops a node silent for twice that, and
the node answers for a task whose process died after twice that); see
``common.flower_patches`` for what is shortened and what it costs.
"""

from __future__ import annotations

import argparse
import sys

from common.flower_patches import (
    DEFAULT_IDLE_POLL_S,
    DEFAULT_REPLY_POLL_S,
    set_heartbeat,
    shorten_supernode,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--idle-poll-s", type=float, default=DEFAULT_IDLE_POLL_S)
    parser.add_argument("--reply-poll-s", type=float, default=DEFAULT_REPLY_POLL_S)
    parser.add_argument("--heartbeat-interval-s", type=float, default=None)
    ours, flowers = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    from flwr.supercore import heartbeat
    from flwr.supercore.corestate import in_memory_corestate
    from flwr.supernode import fleet_http_connection, start_client_internal
    from flwr.supernode.cli.flower_supernode import flower_supernode

    try:
        shorten_supernode(start_client_internal, ours.idle_poll_s, ours.reply_poll_s)
        if ours.heartbeat_interval_s is not None:
            set_heartbeat(
                fleet_http_connection,
                heartbeat,
                in_memory_corestate,
                interval_s=ours.heartbeat_interval_s,
            )
    except ValueError as exc:
        print(f"edgeflex-supernode: {exc}", file=sys.stderr)
        return 2
    sys.argv = ["flower-supernode", *flowers]
    flower_supernode()
    return 0


if __name__ == "__main__":
    sys.exit(main())

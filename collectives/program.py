"""A collective's program: the rest of its round after the training replies, as a generator.

It yields each further ``Exchange`` for the strategy to send through the grid (in plain sight,
strategies/edge.py), and each ``Screen`` or ``Combine`` of contributions for the strategy's
defence to answer (collectives/defence.py: the one place the defence is applied, so
no collective can skip it), and returns the ``Aggregate``. The ``ExchangeLog`` keeps what
happened: phases as the clock will charge them, refused replies, nodes that failed.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from logging import WARNING

from flwr.app import Message
from flwr.common import log

from collectives.base import Aggregate, Indices, Participant, RoundPlan, Vector
from wire.nbytes import content_nbytes
from wire.tally import ClientWork
from wire.train_reply import compress_s_of

REASON_CHARS = 300  # longest refusal reason kept (log line and record)


@dataclass(frozen=True)
class Phase:
    """One exchange of the round as the clock will charge it."""

    name: str
    works: list[ClientWork]
    wall_s: float | None  # the server's wall time of the exchange (timing = "measured")
    bytes_down: int  # everything sent in it


@dataclass
class ExchangeLog:
    """What happened in a round's exchanges: phases, refused replies, nodes that failed."""

    phases: list[Phase] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def refuse(self, node: int, phase: str | None, reason: BaseException | str) -> None:
        """Note a refused reply: the reason, bounded in length (it may quote the client)."""
        where = f"node {node}" if phase is None else f"node {node} ({phase})"
        text = str(reason)
        if isinstance(reason, BaseException) and not isinstance(reason, ValueError | KeyError):
            text = f"{type(reason).__name__}: {text}"  # not one of ours: name what it was
        if len(text) > REASON_CHARS:
            text = f"{text[: REASON_CHARS - 20]}...({len(text)} chars)"
        log(WARNING, "Refused reply from %s: %s", where, text)
        self.refused.append(f"{where}: {text}")


@dataclass(frozen=True)
class Replies:
    """The replies to one exchange and its wall time at the server."""

    messages: list[Message]
    wall_s: float | None


@dataclass(frozen=True)
class Exchange:
    """Messages the strategy sends through the grid for the program's next phase."""

    messages: list[Message]


@dataclass(frozen=True)
class Screen:
    """A program's request: the defence's judgement of these participants' contributions
    (``positions``: where their entries sit in the model, None: the whole model). The answer's
    participants are the ones kept; the rest are refused in the round's log."""

    participants: list[Participant]
    phase: str | None
    positions: Indices | None = None


@dataclass(frozen=True)
class Combine:
    """A program's request: the defence's combination of these participants' contributions,
    screened first unless a Screen of this phase came before (a collective cannot combine
    what was not judged). Contributions at the same coordinates come back as one vector;
    sparse ones (each at its own indices) as each one's values, for the collective to sum."""

    participants: list[Participant]
    phase: str | None
    positions: Indices | None = None
    # False: combine without screening, leaving out only the partitions the defence already
    # judged against; for contributions whose senders' next ones are screened (PowerSGD's
    # P_i: their (Q_i, dense) vectors are), so that a screen sees one vector a round
    judge: bool = True


@dataclass(frozen=True)
class Defended:
    """The answer to a Screen or Combine: the participants kept, and their combination."""

    participants: list[Participant]
    combined: Vector | None = None  # Combine of contributions at the same coordinates
    values: list[Vector] = field(default_factory=list)  # Combine of sparse contributions


Request = Exchange | Screen | Combine
Program = Generator[Request, Replies | Defended, Aggregate]


def exchange(messages: list[Message]) -> Generator[Request, Replies | Defended, Replies]:
    """Send ``messages`` (``replies = yield from exchange(...)``)."""
    answer = yield Exchange(messages)
    assert isinstance(answer, Replies)
    return answer


def screen(
    participants: list[Participant], phase: str | None, positions: Indices | None = None
) -> Generator[Request, Replies | Defended, list[Participant]]:
    """The participants the defence keeps (``kept = yield from screen(...)``)."""
    answer = yield Screen(participants, phase, positions)
    assert isinstance(answer, Defended)
    return answer.participants


def combine(
    participants: list[Participant],
    phase: str | None,
    positions: Indices | None = None,
    judge: bool = True,
) -> Generator[Request, Replies | Defended, Defended]:
    """The defence's combination (``defended = yield from combine(...)``)."""
    answer = yield Combine(participants, phase, positions, judge)
    assert isinstance(answer, Defended)
    return answer


ReadReply = Callable[[Participant, Message], Vector]  # a phase reply's contribution, checked


def phase_replies(
    plan: RoundPlan,
    participants: list[Participant],
    phase: str,
    bytes_down: int,
    replies: Replies,
    read: ReadReply,
) -> list[Participant]:
    """The participants whose reply to a further phase ``read`` accepted, by partition id,
    each with that reply as its contribution; logs the phase, the refused and the failed.
    ``bytes_down``: of the request each participant was sent."""
    by_node = {p.node_id: p for p in participants}
    accepted: list[Participant] = []
    answered: set[int] = set()
    works: list[ClientWork] = []
    for msg in replies.messages:
        node = msg.metadata.src_node_id
        p = by_node.get(node)
        try:
            if p is None:
                raise ValueError("not a participant of this round")
            if node in answered:
                raise ValueError(f"a second {phase} reply from this node")
            if msg.has_error():
                raise ValueError(f"client error: {msg.error.reason}")
            contribution = read(p, msg)
            compress_s = compress_s_of(msg.content, plan.max_compress_s) or 0.0
            measured = plan.measure(msg)
        except Exception as exc:  # whatever a reply holds, it costs that reply, not the run
            plan.log.refuse(node, phase, exc)
            continue
        answered.add(node)
        p.contribution = contribution
        p.compress_s += compress_s
        accepted.append(p)
        works.append(
            ClientWork(
                p.partition_id, bytes_down, 0, content_nbytes(msg.content), measured=measured
            )
        )
    plan.log.phases.append(Phase(phase, works, replies.wall_s, sum(w.bytes_down for w in works)))
    plan.log.failed.extend(
        f"node {p.node_id} (partition {p.partition_id}) ({phase}): no usable reply"
        for p in participants
        if p.node_id not in answered
    )
    accepted.sort(key=lambda p: p.partition_id)
    return accepted

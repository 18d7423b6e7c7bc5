"""Where a connection stands with its socket: one value, every move in one table.

Why: :class:`~duplexctl.client.connection.DuplexConnection` decided what a lost socket means
(resume? stay detached? end the stream?) from three flags — "dropped on purpose",
"closing", "finished" — set in five places; a resume that succeeded while a close was
reattaching must not undo the close, and only the order of the flag checks said so. The
session's own lifecycle (opened, resumed, closed by the server …) is
:mod:`duplexctl.protocol.lifecycle`; this is the shell's: what the client itself is doing
with the connection. A move the table does not list leaves the value as it is.
"""

from __future__ import annotations

import enum


class Attachment(enum.Enum):
    """What the client is doing with the connection."""

    ATTACHED = "attached"  # in use: a lost socket is a loss (resumed when it may be)
    HELD = "held"  # drop() without auto-resume: detached on purpose until resume()
    CLOSING = "closing"  # close() is running: a lost socket only ends the stream
    RELEASED = "released"  # everything let go: nothing more happens


class Move(enum.Enum):
    DROP = "drop"  # drop(): detach on purpose, stay detached
    LOSE = "lose"  # drop(auto_resume=True): behave as an unexpected loss
    RESUMED = "resumed"  # a resume attached a new socket
    CLOSE = "close"  # close() started
    RELEASE = "release"  # everything released


#: (attachment, move) -> the next attachment. A pair not listed leaves it unchanged: a close
#: or a release is never undone, and a resume during a close (its one reattach) stays a close.
MOVES: dict[tuple[Attachment, Move], Attachment] = {
    (Attachment.ATTACHED, Move.DROP): Attachment.HELD,
    (Attachment.HELD, Move.LOSE): Attachment.ATTACHED,
    (Attachment.HELD, Move.RESUMED): Attachment.ATTACHED,
    (Attachment.ATTACHED, Move.CLOSE): Attachment.CLOSING,
    (Attachment.HELD, Move.CLOSE): Attachment.CLOSING,
    **{(a, Move.RELEASE): Attachment.RELEASED for a in Attachment if a is not Attachment.RELEASED},
}


def after(attachment: Attachment, move: Move) -> Attachment:
    """The attachment after ``move`` (:data:`MOVES`; unchanged where it lists nothing)."""
    return MOVES.get((attachment, move), attachment)

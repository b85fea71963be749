"""``loadgen.load.messages``: what the user side sends reaches the coordinator as it was sent, through Locust's own
message encoding (msgpack), for any completion summary and any in-flight word."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from locust.rpc.protocol import Message

from loadgen.load.live import LiveTable, summarise
from loadgen.load.messages import CanaryDone, Inflight
from loadgen.load.stages import FailedBackground


def travelled(kind: str, data: dict[str, Any]) -> dict[str, Any]:
    """``data`` as the receiving process's handler gets it: serialised and read back by Locust's ``Message``."""
    got = Message.unserialize(Message(kind, data, "worker-1").serialize())
    assert got.type == kind
    return dict(got.data)


ids = st.lists(st.integers(min_value=0, max_value=3), max_size=4)


@given(
    phase=st.sampled_from(["warmup", "baseline", "sweep"]),
    level=st.none() | st.integers(min_value=0, max_value=64),
    ident=st.none() | ids,
    ref=st.none() | ids,
    held=st.none() | st.integers(min_value=0, max_value=64),
)
def test_a_canary_summary_arrives_as_sent(
    phase: str, level: int | None, ident: list[int] | None, ref: list[int] | None, held: int | None
) -> None:
    done = summarise(
        canary="c",
        stage=3,
        phase=phase,  # type: ignore[arg-type]
        level=level,
        status="ok" if ident is not None else "error",
        token_ids=ident,
        tokens=None if ident is None else [str(t) for t in ident],
        text=None if ident is None else "".join(map(str, ident)),
        reference=None if ref is None else {"token_ids": ref},
        background_held=held,
    )
    assert CanaryDone.from_msg(travelled("lg_done", done.to_msg())) == done


def test_the_table_reads_a_summary_after_the_wire_as_before() -> None:
    sent = [
        summarise(canary="c", stage=1, phase="baseline", level=0, status="ok", token_ids=[1, 2], tokens=None,
                  text=None, reference=None),
        summarise(canary="c", stage=2, phase="sweep", level=4, status="ok", token_ids=[1, 3], tokens=None,
                  text=None, reference={"token_ids": [1, 2]}, background_held=4),
    ]  # fmt: skip
    direct, wired = LiveTable(), LiveTable()
    for done in sent:
        if done.phase == "sweep":  # as the coordinator does: the references once the baseline is in
            refs = direct.choose_references()
            assert wired.choose_references() == refs and refs["c"]["token_ids"] == [1, 2]
        direct.add(done)
        wired.add(CanaryDone.from_msg(travelled("lg_done", done.to_msg())))
    assert wired.rows() == direct.rows() and wired.diverged("c", 4) == 1


@given(
    users=st.integers(min_value=0, max_value=10_000),
    held=st.integers(min_value=0, max_value=10_000),
    failing=st.none()
    | st.builds(
        FailedBackground,
        stage=st.integers(min_value=0, max_value=100),
        background_errors=st.integers(min_value=0, max_value=10_000),
        background_requests=st.integers(min_value=0, max_value=10_000),
        first_error=st.text(max_size=200),
    ),
)
def test_an_inflight_word_arrives_as_sent(users: int, held: int, failing: FailedBackground | None) -> None:
    sent = Inflight("worker-1", users, held, failing)
    assert Inflight.from_msg(travelled("lg_inflight", sent.to_msg())) == sent

"""OpenAI-compatible request building and response parsing, for every server dialect the tool meets.

The pure protocol layer of the load path: ``build_body`` makes a request body that states every
sampling parameter; ``parse_body`` and ``StreamAccumulator`` turn a body or a stream's ``data``
payloads into one ``Completion``; ``features_from_probe`` reads what an endpoint supports from a
probe's answer. No I/O, no logging, no Locust/gevent/asyncio imports: it runs inside gevent on
the hot path and in tests alike. Dialect evidence (which server file each shape comes from) is in
``tests/loadgen/core/wire/fixtures/README.md``.
"""

from loadgen.core.wire.features import features_from_probe
from loadgen.core.wire.request import SAMPLING_DEFAULTS, build_body
from loadgen.core.wire.response import StreamAccumulator, parse_body, parse_usage
from loadgen.core.wire.types import KINDS, Completion, Features, Kind, MalformedResponse, Sampling, StreamError

__all__ = [
    "KINDS",
    "SAMPLING_DEFAULTS",
    "Completion",
    "Features",
    "Kind",
    "MalformedResponse",
    "Sampling",
    "StreamAccumulator",
    "StreamError",
    "build_body",
    "features_from_probe",
    "parse_body",
    "parse_usage",
]

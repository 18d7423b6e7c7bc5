"""Prometheus remote write 1.0 messages (``prometheus.WriteRequest``), encoded by protobuf.

The remote-write wire format is a snappy-compressed protobuf ``WriteRequest`` (the Remote
Write 1.0 specification; native histograms are its ``Histogram`` message). protobuf (Google's
runtime, upb in C) does the encoding and cramjam's snappy the compression: no varint or
zig-zag code of ours (``--prometheus-rw``: docs/metrics.md "Remote write").

Why the messages are declared here, in Python, and not compiled from a ``.proto`` file: the
descriptor below *is* the schema protoc would have produced (a ``FileDescriptorProto``), so
there is no generated module to regenerate, no protoc in the tool chain and no generated
code's runtime-version check to keep in step with the installed protobuf. Only the fields a
client writes are declared, under the field numbers of Prometheus's ``prompb/types.proto``
and ``prompb/remote.proto`` (``WriteRequest.timeseries = 1``, ``metadata = 3``;
``TimeSeries.labels = 1``, ``samples = 2``, ``histograms = 4``; the ``Histogram`` fields 1-15):
a receiver skips nothing it needs, and protobuf skips what we leave out.
"""

from __future__ import annotations

import functools
from typing import Any, Final

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PACKAGE: Final = "prometheus"
_F = descriptor_pb2.FieldDescriptorProto

#: message → [(field, number, type, label, message or enum type name, oneof index)]
_MESSAGES: Final[dict[str, list[tuple[str, int, int, int, str | None, int | None]]]] = {
    "Label": [
        ("name", 1, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, None),
        ("value", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, None),
    ],
    "Sample": [
        ("value", 1, _F.TYPE_DOUBLE, _F.LABEL_OPTIONAL, None, None),
        ("timestamp", 2, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, None),
    ],
    "BucketSpan": [
        ("offset", 1, _F.TYPE_SINT32, _F.LABEL_OPTIONAL, None, None),
        ("length", 2, _F.TYPE_UINT32, _F.LABEL_OPTIONAL, None, None),
    ],
    "Histogram": [
        ("count_int", 1, _F.TYPE_UINT64, _F.LABEL_OPTIONAL, None, 0),
        ("sum", 3, _F.TYPE_DOUBLE, _F.LABEL_OPTIONAL, None, None),
        ("schema", 4, _F.TYPE_SINT32, _F.LABEL_OPTIONAL, None, None),
        ("zero_threshold", 5, _F.TYPE_DOUBLE, _F.LABEL_OPTIONAL, None, None),
        ("zero_count_int", 6, _F.TYPE_UINT64, _F.LABEL_OPTIONAL, None, 1),
        ("negative_spans", 8, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "BucketSpan", None),
        ("negative_deltas", 9, _F.TYPE_SINT64, _F.LABEL_REPEATED, None, None),
        ("positive_spans", 11, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "BucketSpan", None),
        ("positive_deltas", 12, _F.TYPE_SINT64, _F.LABEL_REPEATED, None, None),
        ("reset_hint", 14, _F.TYPE_ENUM, _F.LABEL_OPTIONAL, "Histogram.ResetHint", None),
        ("timestamp", 15, _F.TYPE_INT64, _F.LABEL_OPTIONAL, None, None),
    ],
    "TimeSeries": [
        ("labels", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "Label", None),
        ("samples", 2, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "Sample", None),
        ("histograms", 4, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "Histogram", None),
    ],
    "MetricMetadata": [
        ("type", 1, _F.TYPE_ENUM, _F.LABEL_OPTIONAL, "MetricMetadata.MetricType", None),
        ("metric_family_name", 2, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, None),
        ("help", 4, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, None),
        ("unit", 5, _F.TYPE_STRING, _F.LABEL_OPTIONAL, None, None),
    ],
    "WriteRequest": [
        ("timeseries", 1, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "TimeSeries", None),
        ("metadata", 3, _F.TYPE_MESSAGE, _F.LABEL_REPEATED, "MetricMetadata", None),
    ],
}
#: the two oneofs of ``Histogram`` (``count``, ``zero_count``), by index
_ONEOFS: Final = {"Histogram": ("count", "zero_count")}
_ENUMS: Final = {
    "Histogram": ("ResetHint", ("UNKNOWN", "YES", "NO", "GAUGE")),
    "MetricMetadata": (
        "MetricType",
        ("UNKNOWN", "COUNTER", "GAUGE", "HISTOGRAM", "GAUGEHISTOGRAM", "SUMMARY", "INFO"),
    ),
}

#: ``MetricMetadata.MetricType`` values
COUNTER: Final = 1
GAUGE: Final = 2
HISTOGRAM: Final = 3
SUMMARY: Final = 5


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="duplexctl/prometheus_remote_write.proto", package=PACKAGE, syntax="proto3"
    )
    for name, fields in _MESSAGES.items():
        message = proto.message_type.add(name=name)
        for oneof in _ONEOFS.get(name, ()):
            message.oneof_decl.add(name=oneof)
        if name in _ENUMS:
            enum_name, values = _ENUMS[name]
            enum = message.enum_type.add(name=enum_name)
            for number, value in enumerate(values):
                enum.value.add(name=value, number=number)
        for field, number, kind, label, type_name, oneof_index in fields:
            entry = message.field.add(name=field, number=number, type=kind, label=label)
            if type_name is not None:
                entry.type_name = f".{PACKAGE}.{type_name}"
            if oneof_index is not None:
                entry.oneof_index = oneof_index
    return proto


@functools.cache
def messages() -> dict[str, Any]:
    """The message classes by name (``WriteRequest``, ``TimeSeries`` …), built once."""
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file())
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{name}"))
        for name in _MESSAGES
    }

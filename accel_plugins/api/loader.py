"""Message classes for the generated stubs, built on protobuf's upb extension alone.

protobuf's own builder (``google.protobuf.internal.builder``, which protoc's modules
call) loads the pure-Python message implementation, ``text_format``, the Python
descriptor pool and their helpers even when upb serves every message: about 1.5 MB of
a plugin's memory, and part of its start, for code a plugin never runs (issue 34). With
upb, the descriptors and classes come from upb's own default pool and metaclass, the
same objects protobuf's builder would have handed back, so a message built here is the
message protobuf builds: same pool, same class per descriptor, same wire bytes.

``hack/gen-protos`` writes each ``*_pb2`` module to call :func:`build` when
:data:`UPB` is true, and to run protoc's code as protoc wrote it otherwise (the
``python`` implementation, chosen with ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION``).
This module is written by hand; the generator leaves it in place.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import message
from google.protobuf.internal import api_implementation, enum_type_wrapper

UPB = api_implementation.Type() == "upb"


def build(serialized: bytes, namespace: dict[str, Any], module_name: str) -> Any:
    """Add one ``.proto`` file's descriptor to the default pool and fill ``namespace`` with
    what protoc's builder puts in a ``_pb2`` module: ``_NAME`` descriptors for messages
    (nested ones as ``_OUTER_INNER``), enums and services, the enums' wrappers and value
    constants, and a class per message (nested classes as attributes). Returns the file
    descriptor (the module's ``DESCRIPTOR``)."""
    # upb's metaclass, under the alias protobuf's own message factory uses for it.
    from google.protobuf.pyext import cpp_message

    upb = api_implementation._c_module  # the module whose pool protobuf's Default() returns
    file = upb.default_pool.AddSerializedFile(serialized)
    for name, enum in file.enum_types_by_name.items():
        namespace["_" + name.upper()] = enum
        namespace[name] = enum_type_wrapper.EnumTypeWrapper(enum)
        for value in enum.values:
            namespace[value.name] = value.number
    for name, service in file.services_by_name.items():
        namespace["_" + name.upper()] = service
    for name, descriptor in file.message_types_by_name.items():
        _name_descriptors(namespace, descriptor, "_" + name.upper())
        namespace[name] = _message_class(
            cpp_message.GeneratedProtocolMessageType, descriptor, module_name, ""
        )
    return file


def _name_descriptors(namespace: dict[str, Any], descriptor: Any, key: str) -> None:
    namespace[key] = descriptor
    for name, nested in descriptor.nested_types_by_name.items():
        _name_descriptors(namespace, nested, key + "_" + name.upper())
    for enum in descriptor.enum_types:
        namespace[key + "_" + enum.name.upper()] = enum


def _message_class(metaclass: Any, descriptor: Any, module_name: str, outer: str) -> Any:
    members: dict[str, Any] = {
        name: _message_class(metaclass, nested, module_name, outer + descriptor.name + ".")
        for name, nested in descriptor.nested_types_by_name.items()
    }
    members |= {
        "DESCRIPTOR": descriptor,
        "__module__": module_name,
        "__qualname__": outer + descriptor.name,
    }
    return metaclass(descriptor.name, (message.Message,), members)

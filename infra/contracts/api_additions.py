"""Fields Google's REST API documents that the installed client's types do not have yet.

A Cloud Run function's Direct VPC egress (`serviceConfig.directVpcNetworkInterface[]` and
`serviceConfig.directVpcEgress`) is in the Cloud Functions v2 REST reference, but not in the
protos of google-cloud-functions (1.24, nor 1.25, the newest). So that such a function is
still parsed strictly with Google's `Function`, the additions below, worded as the REST
reference has them, are added to a copy of the installed `functions.proto` in a descriptor
pool of their own: a misspelt field or enum value inside them is refused like any other.
Once the installed type has the marker field, it is used as it is and the addition is moot.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final


@dataclass(frozen=True)
class ProtoAdditions:
    """Declarations added to the proto file of one message type, in protobuf text format."""

    marker: tuple[str, str]
    """(message, field): present in the installed type, nothing is added."""
    to_file: str
    """FileDescriptorProto text: messages added at the file's top level."""
    to_messages: tuple[tuple[str, str], ...]
    """(message name in the file, DescriptorProto text merged into it): fields, enums."""


FUNCTIONS_V2_DIRECT_VPC: Final = ProtoAdditions(
    marker=("ServiceConfig", "direct_vpc_egress"),
    # REST: DirectVpcNetworkInterface {network, subnetwork, tags[]}; ServiceConfig's
    # directVpcNetworkInterface[] and directVpcEgress (DirectVpcEgress). Field numbers do not
    # matter to a JSON parse; these are past the installed ones.
    to_file="""
        message_type {
          name: "DirectVpcNetworkInterface"
          field { name: "network" json_name: "network" number: 1
                  label: LABEL_OPTIONAL type: TYPE_STRING }
          field { name: "subnetwork" json_name: "subnetwork" number: 2
                  label: LABEL_OPTIONAL type: TYPE_STRING }
          field { name: "tags" json_name: "tags" number: 3
                  label: LABEL_REPEATED type: TYPE_STRING }
        }
    """,
    to_messages=(("ServiceConfig", """
        field { name: "direct_vpc_network_interface" json_name: "directVpcNetworkInterface"
                number: 1001 label: LABEL_REPEATED type: TYPE_MESSAGE
                type_name: ".google.cloud.functions.v2.DirectVpcNetworkInterface" }
        field { name: "direct_vpc_egress" json_name: "directVpcEgress" number: 1002
                label: LABEL_OPTIONAL type: TYPE_ENUM
                type_name: ".google.cloud.functions.v2.ServiceConfig.DirectVpcEgress" }
        enum_type {
          name: "DirectVpcEgress"
          value { name: "DIRECT_VPC_EGRESS_UNSPECIFIED" number: 0 }
          value { name: "VPC_EGRESS_PRIVATE_RANGES_ONLY" number: 1 }
          value { name: "VPC_EGRESS_ALL_TRAFFIC" number: 2 }
        }
    """),),
)


def with_additions(message_class: Any, additions: ProtoAdditions) -> Any:
    """`message_class` (a protobuf message class) with `additions` in its file, or itself
    when its file has them already."""
    from google.protobuf import (  # type: ignore[import-untyped]
        descriptor_pb2,
        descriptor_pool,
        message_factory,
        text_format,
    )

    descriptor = message_class.DESCRIPTOR
    file = descriptor.file
    owner, field = additions.marker
    if field in file.message_types_by_name[owner].fields_by_name:
        return message_class
    pool = descriptor_pool.DescriptorPool()
    added: set[str] = set()

    def add_dependencies(of: Any) -> None:
        for dependency in of.dependencies:
            if dependency.name not in added:
                added.add(dependency.name)
                add_dependencies(dependency)
                pool.Add(descriptor_pb2.FileDescriptorProto.FromString(dependency.serialized_pb))

    add_dependencies(file)
    proto = descriptor_pb2.FileDescriptorProto.FromString(file.serialized_pb)
    text_format.Merge(additions.to_file, proto)
    for name, text in additions.to_messages:
        text_format.Merge(text, next(m for m in proto.message_type if m.name == name))
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(descriptor.full_name))

"""Run the kit locally: the real Firestore emulator and the real function, as processes.

Shared by the test fixtures, `make demo` and `make bench`, so all three start and stop
things the same way.
"""

from local_stack.processes import (
    EmulatorMissing,
    FirestoreEmulator,
    FunctionServer,
    LocalStackError,
    PortInUse,
    free_port,
)

__all__ = [
    "EmulatorMissing",
    "FirestoreEmulator",
    "FunctionServer",
    "LocalStackError",
    "PortInUse",
    "free_port",
]

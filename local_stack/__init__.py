"""Run the kit locally: the real Firestore emulator and the real function, as processes.

ServiceServer serves a team's own service (examples/own-service/) by werkzeug or uvicorn.
Shared by the test fixtures, `make demo` and `make bench`, so all three start and stop
things the same way. Also here, for the tests and the benchmark alike: deliveries.py
(Scheduler-style headers, in-process function instances), steered_job.py (a job the
request body steers, which logs each execution to a ledger file), rpc_counter.py (counts a
Firestore client's RPCs) and store_faults.py (a TCP proxy in front of the emulator that
stalls or cuts the store; its faults and seeded schedules are fault_schedule.py's, each
connection through it a proxy_connection.py's).
"""

from local_stack.fault_schedule import FaultKind, FaultSchedule, InjectedFault, PlannedFault
from local_stack.processes import (
    EmulatorMissing,
    FirestoreEmulator,
    FunctionServer,
    LocalStackError,
    PortInUse,
    ServiceServer,
    free_port,
)
from local_stack.store_faults import StoreFaultProxy

__all__ = [
    "EmulatorMissing",
    "FaultKind",
    "FaultSchedule",
    "FirestoreEmulator",
    "FunctionServer",
    "InjectedFault",
    "LocalStackError",
    "PlannedFault",
    "PortInUse",
    "ServiceServer",
    "StoreFaultProxy",
    "free_port",
]

"""The deterministic simulation of the kit (`make simulate`, issue 37).

One module per idea:
- `firestore_fake`: `FakeFirestore`, an in-memory stand-in for the part of Firestore's
  client the kit calls, whose every RPC can land, fail, stall or land with its reply lost
  (`Rpc`, `Fate`); tests/simulation/test_fake_firestore.py holds it to the real emulator.
- `scheduler`: actors as threads, one baton, seeded choices and kills, simulated time.
- `clock`: the kit's clocks, sleeps and uuid4 simulated while a seed runs.
- `actors`: instances, lease renewals, deliveries (Scheduler's attempts), stalled commits;
  `watch`: the watchdog and its queue; `operators`: `make rerun` and `make backfill`.
- `world`: a seed's stack and its run; `record`: what it left; `invariants`: what must
  hold (docs/protocol.md, "Checked by simulation"); `cli`: `python -m simulation`.
"""

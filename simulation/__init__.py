"""The deterministic simulation of the kit (`make simulate`, issue 37).

One module per idea:
- `firestore_fake`: `FakeFirestore`, an in-memory stand-in for the part of Firestore's
  client the kit calls, whose every RPC can land, fail, stall or land with its reply lost
  (`Rpc`, `Fate`); tests/simulation/test_fake_firestore.py holds it to the real emulator.
"""

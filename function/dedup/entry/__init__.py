"""The HTTP entry of the dedup function: a delivery parsed and answered (http), its
caller checked (callers), and the wiring of settings, store and job logic (app)."""

"""Tests of the protocol in a team's own service: function/dedup/adapters/ and
examples/own-service/."""

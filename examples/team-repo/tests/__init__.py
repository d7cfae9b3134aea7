"""Your tests (tests.jobs.*: a package, so its modules never shadow your `jobs`)."""

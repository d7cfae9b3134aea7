"""The kit's example job logic: `example_jobs.example:run` (the default jobLogic) and
`example_jobs.flaky:run` (the demo's failing job). Your jobs go in function/jobs/
(`make new-job NAME=<name>`), which is yours: the kit ships nothing there."""
